"""``core.ingest``: strict parsing of request bodies and bounded decompression."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.ingest import (
    IngestLimits,
    InvalidRequestError,
    check_content_type,
    content_codings,
    gunzip,
    parse_body,
)

_objects = st.dictionaries(
    st.text(max_size=5),
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    max_size=4,
)


@given(data=st.binary(max_size=3000), limit=st.integers(min_value=0, max_value=4000))
def test_gunzip_returns_the_data_or_refuses_past_the_limit(data: bytes, limit: int) -> None:
    packed = gzip.compress(data)
    if len(data) <= limit:
        assert gunzip(packed, limit) == data
    else:
        with pytest.raises(InvalidRequestError) as refused:
            gunzip(packed, limit)
        assert refused.value.status == 413


@given(parts=st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_gunzip_reads_every_member_of_a_multi_member_body(parts: list[bytes]) -> None:
    assert gunzip(b"".join(gzip.compress(p) for p in parts), 10_000) == b"".join(parts)


@given(items=st.lists(_objects, min_size=1, max_size=20), spaced=st.booleans())
def test_an_array_and_ndjson_of_the_same_objects_give_the_same_messages(
    items: list[dict[str, object]], spaced: bool
) -> None:
    separators = (", ", ": ") if spaced else (",", ":")
    encoded = [json.dumps(item, separators=separators).encode() for item in items]
    as_array = b"[" + b",\n ".join(encoded) + b"]"
    as_ndjson = b"\n".join(encoded)
    limits = IngestLimits()
    assert parse_body(as_array, limits) == encoded
    assert parse_body(as_ndjson, limits) == encoded


@pytest.mark.parametrize(
    "value",
    [None, "", "application/json", "Application/JSON; charset=utf-8", "application/ld+json"],
)
def test_json_content_types_are_read(value: str | None) -> None:
    check_content_type(value)


@pytest.mark.parametrize("value", ["application/xml", "text/csv", "multipart/form-data; b=1"])
def test_other_content_types_are_refused_with_415(value: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        check_content_type(value)
    assert refused.value.status == 415


def test_content_codings_drop_identity_and_refuse_what_is_not_gzip() -> None:
    assert content_codings(None) == ()
    assert content_codings("identity") == ()
    assert content_codings("gzip, GZIP") == ("gzip", "gzip")
    with pytest.raises(InvalidRequestError, match="'deflate'"):
        content_codings("gzip, deflate")
