"""``S3Location``: the ``s3://bucket/prefix`` every S3 adapter works under."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["S3Location"]


@dataclass(frozen=True, slots=True)
class S3Location:
    """``s3://bucket/prefix``: ``key("a/b")`` is ``prefix/a/b`` (or ``a/b`` without prefix)."""

    bucket: str
    prefix: str = ""

    @classmethod
    def parse(cls, url: str) -> S3Location:
        """``ValueError`` naming the problem when ``url`` is not ``s3://bucket[/prefix]``."""
        if not url.startswith("s3://"):
            raise ValueError(f"{url!r} is not an s3:// URL")
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not bucket or "/" in bucket or bucket != bucket.strip():
            raise ValueError(f"{url!r} names no bucket (s3://bucket/prefix)")
        return cls(bucket, prefix.strip("/"))

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def relative(self, key: str) -> str:
        return key.removeprefix(f"{self.prefix}/") if self.prefix else key

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
