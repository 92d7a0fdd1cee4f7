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
    content_coding,
    declared_length,
    gunzip,
    parse_body,
    reservation_for,
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


def test_content_coding_drops_identity_and_reads_one_gzip_layer() -> None:
    assert content_coding(None) is None
    assert content_coding("") is None
    assert content_coding("identity") is None
    assert content_coding(" GZIP ") == "gzip"
    assert content_coding("identity, gzip") == "gzip"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("deflate", "'deflate'"),
        ("br", "'br'"),
        ("gzip, deflate", "'deflate'"),
        ("deflate, gzip", "'deflate'"),
        ("gzip, gzip", "'gzip, gzip' has 2 layers; one gzip layer at most"),
        ("gzip,GZIP,gzip", "3 layers"),
        ("gzip, identity, gzip", "2 layers"),
    ],
)
def test_content_coding_refuses_another_coding_or_more_than_one_layer_with_415(
    value: str, says: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        content_coding(value)
    assert refused.value.status == 415
    assert says in str(refused.value)


@given(layers=st.lists(st.sampled_from(["gzip", "GZIP", " gzip", "identity", ""]), max_size=6))
def test_content_coding_takes_a_header_only_when_it_names_gzip_at_most_once(
    layers: list[str],
) -> None:
    gzips = sum(layer.strip().lower() == "gzip" for layer in layers)
    header = ",".join(layers)
    if gzips <= 1:
        assert content_coding(header) == ("gzip" if gzips else None)
    else:
        with pytest.raises(InvalidRequestError) as refused:
            content_coding(header)
        assert refused.value.status == 415


@pytest.mark.parametrize(
    ("value", "length"),
    [
        (None, None),
        ("", None),
        ("12", 12),
        (" 7 ", 7),
        ("0", 0),
        ("-1", None),
        ("1e3", None),
        ("²", None),
        ("12, 12", None),
    ],
)
def test_declared_length_is_a_plain_decimal_or_none(value: str | None, length: int | None) -> None:
    assert declared_length(value) == length


_limits = st.integers(min_value=1, max_value=64 * 1024 * 1024)


@given(
    declared=st.none() | st.integers(min_value=0, max_value=1 << 40),
    gzipped=st.booleans(),
    limit=_limits,
)
def test_a_reservation_covers_what_the_request_may_read_and_inflate_and_no_more(
    declared: int | None, gzipped: bool, limit: int
) -> None:
    held = reservation_for(declared, gzipped=gzipped, max_body_bytes=limit)
    # what reading may buffer: the declared body, or up to the limit when none is declared
    sent = limit if declared is None else min(declared, limit)
    # what the messages may amount to: the body, or what its gzip layer inflates to (the
    # inflation stops at the limit); the gateway holds them twice over
    messages = limit if gzipped else sent
    assert held == (sent if gzipped else 0) + 2 * messages
    assert 0 <= held <= 3 * limit
    assert held >= 2 * sent


@given(
    smaller=st.integers(min_value=0, max_value=1 << 30),
    more=st.integers(min_value=0, max_value=1 << 30),
    gzipped=st.booleans(),
    limit=_limits,
)
def test_a_reservation_grows_with_the_declared_length_up_to_an_undeclared_one(
    smaller: int, more: int, gzipped: bool, limit: int
) -> None:
    def held(declared: int | None) -> int:
        return reservation_for(declared, gzipped=gzipped, max_body_bytes=limit)

    assert held(smaller) <= held(smaller + more) <= held(None)


@given(data=st.binary(max_size=3000), limit=st.integers(min_value=1, max_value=4000))
def test_a_gzip_body_and_what_it_inflates_to_stay_within_its_reservation(
    data: bytes, limit: int
) -> None:
    packed = gzip.compress(data)
    if len(packed) > limit:
        return  # refused on its Content-Length, before any reservation
    held = reservation_for(len(packed), gzipped=True, max_body_bytes=limit)
    try:
        inflated = gunzip(packed, limit)
    except InvalidRequestError:
        return  # refused (413) once the output passed the limit
    # the body, the inflated output and the messages parsed from it
    assert len(packed) + 2 * len(inflated) <= held
