"""``s3://bucket/prefix`` as every S3 adapter and command takes it: parsed, or refused with
a clear error that changes nothing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from adapters.s3 import S3Location
from services.cli.main import app


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://shoal", "shoal", ""),
        ("s3://shoal/", "shoal", ""),
        ("s3://shoal/landing", "shoal", "landing"),
        ("s3://shoal/a/b/", "shoal", "a/b"),
    ],
)
def test_parse(url: str, bucket: str, prefix: str) -> None:
    where = S3Location.parse(url)
    assert (where.bucket, where.prefix) == (bucket, prefix)
    assert where.key("date=2026-11-25/f.parquet") == (
        f"{prefix}/date=2026-11-25/f.parquet" if prefix else "date=2026-11-25/f.parquet"
    )


@pytest.mark.parametrize("url", ["s3://", "s3:///x", "http://shoal/x", "shoal/x", "s3:/x"])
def test_parse_refuses_what_names_no_bucket(url: str) -> None:
    with pytest.raises(ValueError, match=r"s3://|bucket"):
        S3Location.parse(url)


@given(
    st.from_regex(r"[a-z0-9][a-z0-9-]{1,20}", fullmatch=True),
    st.from_regex(r"([a-z0-9=_-]{1,8}/){0,3}[a-z0-9=_-]{1,8}", fullmatch=True),
)
def test_keys_and_relative_paths_round_trip(bucket: str, path: str) -> None:
    for prefix in ("", "zone", "a/b"):
        where = S3Location(bucket, prefix)
        assert where.relative(where.key(path)) == path
        assert S3Location.parse(str(where)) == where


def test_analytics_refuses_an_s3_url_without_a_bucket() -> None:
    result = CliRunner().invoke(app, ["analytics", "audit", "s3:///landing", "--json"])
    assert result.exit_code == 2
    assert "names no bucket" in result.output
