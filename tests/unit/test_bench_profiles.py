"""The bench's profile summary: the frames on top of py-spy's collapsed stacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.profiles import top_frames


def test_top_frames_add_a_functions_samples_across_lines_stacks_and_profiles(
    tmp_path: Path,
) -> None:
    first = tmp_path / "h1.txt"
    first.write_text(
        "<module> (run.py:1);handle (landing.py:10);encode (parquet.py:5) 6\n"
        "<module> (run.py:1);handle (landing.py:12) 2\n"
        "<module> (run.py:1);fetch (nats.py:40);encode (parquet.py:7) 1\n"
    )
    second = tmp_path / "h2.txt"
    second.write_text("<module> (run.py:1);handle (landing.py:10) 1\n")

    frames = top_frames([first, second, tmp_path / "never-written.txt"], count=2)

    assert [frame for frame, _ in frames] == ["encode (parquet.py)", "handle (landing.py)"]
    assert [share for _, share in frames] == pytest.approx([0.7, 0.3])


def test_no_samples_no_frames(tmp_path: Path) -> None:
    empty = tmp_path / "gateway.txt"
    empty.write_text("")
    assert top_frames([empty]) == []
