"""partition_for is the reference's sha256-as-big-endian-integer modulo P."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.partitioning import DEFAULT_PARTITIONS, partition_for


def _big_endian(digest: bytes) -> int:
    # An independent reading of the digest, like Go's big.Int.SetBytes: byte by byte.
    value = 0
    for byte in digest:
        value = value * 256 + byte
    return value


def _expected(project_id: str, partitions: int) -> int:
    return _big_endian(hashlib.sha256(project_id.encode("utf-8")).digest()) % partitions


@given(project_id=st.text(), partitions=st.integers(min_value=1, max_value=10_000))
def test_partition_equals_sha256_big_endian_mod_p_when_text_is_arbitrary(
    project_id: str, partitions: int
) -> None:
    assert (
        partition_for(project_id, partitions)
        == int.from_bytes(hashlib.sha256(project_id.encode("utf-8")).digest(), "big") % partitions
    )
    assert partition_for(project_id, partitions) == _expected(project_id, partitions)


@given(project_id=st.text(alphabet=st.characters(min_codepoint=0x80, codec="utf-8")))
def test_partition_uses_utf8_bytes_when_text_is_non_ascii(project_id: str) -> None:
    assert partition_for(project_id) == _expected(project_id, DEFAULT_PARTITIONS)


@given(project_id=st.text(), partitions=st.integers(min_value=1, max_value=1_000))
def test_partition_is_in_range_when_p_is_positive(project_id: str, partitions: int) -> None:
    assert 0 <= partition_for(project_id, partitions) < partitions


@pytest.mark.parametrize(
    "project_id",
    ["", "project-1", "a", "projet-é", "项目-42", "🚀", "x" * 1000],
)
def test_partition_matches_fixed_vector_when_id_is_known(project_id: str) -> None:
    assert partition_for(project_id) == _expected(project_id, 128)
    assert partition_for(project_id, 7) == _expected(project_id, 7)


def test_partition_matches_literal_vector_when_id_is_empty() -> None:
    # sha256("") = e3b0c442...b855; its last byte 0x55 = 85 decides the value mod 128.
    assert partition_for("", 128) == 0x55 % 128
    assert partition_for("", 256) == 0x55


def test_partition_defaults_to_128_when_p_is_omitted() -> None:
    assert DEFAULT_PARTITIONS == 128
    assert partition_for("project-1") == partition_for("project-1", 128)


def test_partition_is_zero_when_p_is_one() -> None:
    assert partition_for("anything", 1) == 0


@pytest.mark.parametrize("partitions", [0, -1, -128])
def test_partition_raises_value_error_when_p_below_one(partitions: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        partition_for("project-1", partitions)


def test_partition_raises_value_error_when_p_is_bool() -> None:
    with pytest.raises(ValueError, match="positive"):
        partition_for("project-1", True)
