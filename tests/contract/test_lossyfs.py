"""tests/_lossyfs.py, the file system of the power-cut tests, on a real FUSE mount: what
works through it, and what a crash keeps (only what fsync of the file and of its
directories made durable; see its module doc)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from tests._lossyfs import LossyMount


def put(path: Path, data: bytes, *, sync: bool = False) -> None:
    """Write ``path`` whole (created or truncated), fsynced if ``sync``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)  # FUSE's fsyncdir
    finally:
        os.close(fd)


def sync_tree(root: Path) -> None:
    """fsync every file and directory under ``root``, and ``root``: all of it durable."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(Path(directory) / name, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        sync_dir(Path(directory))


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: a file's content, None for a directory."""
    found: dict[str, bytes | None] = {}
    for directory, dirs, files in os.walk(root):
        here = Path(directory)
        for name in dirs:
            found[str((here / name).relative_to(root))] = None
        for name in files:
            found[str((here / name).relative_to(root))] = (here / name).read_bytes()
    return found


def test_the_operations_table_writers_use_work_at_once(lossy_mount: LossyMount) -> None:
    root = lossy_mount.path
    (root / "d").mkdir()
    put(root / "d" / "f", b"0123456789")
    with pytest.raises(FileExistsError):
        os.open(root / "d" / "f", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    os.truncate(root / "d" / "f", 4)
    with (root / "d" / "f").open("ab") as appended:
        appended.write(b"xy")
    assert (root / "d" / "f").read_bytes() == b"0123xy"
    os.link(root / "d" / "f", root / "d" / "g")
    assert (root / "d" / "g").stat().st_ino == (root / "d" / "f").stat().st_ino
    assert (root / "d" / "g").stat().st_nlink == 2
    with (root / "d" / "g").open("ab") as appended:
        appended.write(b"z")
    assert (root / "d" / "f").stat().st_size == 7  # at once through the other name too
    os.truncate(root / "d" / "f", 6)
    put(root / "d" / "h", b"new")
    (root / "d" / "h").replace(root / "d" / "f")  # rename over a name
    assert (root / "d" / "f").read_bytes() == b"new"
    assert (root / "d" / "g").read_bytes() == b"0123xy"
    (root / "d" / "g").unlink()
    os.utime(root / "d" / "f", ns=(1_000_000_000, 2_000_000_123))
    (root / "d" / "f").chmod(0o600)
    st = (root / "d" / "f").stat()
    assert (st.st_mtime_ns, st.st_mode & 0o777, st.st_size) == (2_000_000_123, 0o600, 3)
    assert [p.name for p in (root / "d").iterdir()] == ["f"]
    (root / "d" / "e").mkdir()
    (root / "d" / "e").rmdir()
    assert os.statvfs(root).f_bsize > 0
    # an open file unlinked stays readable and writable, and leaves no name behind
    with (root / "d" / "f").open("r+b") as kept:
        (root / "d" / "f").unlink()
        kept.write(b"N")
        kept.flush()
        os.fsync(kept.fileno())
        kept.seek(0)
        assert kept.read() == b"New"
        assert list((root / "d").iterdir()) == []


def test_an_unsynced_write_is_lost(lossy_mount: LossyMount) -> None:
    put(lossy_mount.path / "f", b"never synced")
    lossy_mount.crash()
    assert tree(lossy_mount.path) == {}


def test_a_new_file_synced_without_its_directory_is_lost(lossy_mount: LossyMount) -> None:
    put(lossy_mount.path / "f", b"data", sync=True)
    lossy_mount.crash()
    assert tree(lossy_mount.path) == {}


def test_a_file_synced_with_its_directory_is_kept(lossy_mount: LossyMount) -> None:
    put(lossy_mount.path / "f", b"data", sync=True)
    sync_dir(lossy_mount.path)
    put(lossy_mount.path / "g", b"after the directory's sync", sync=True)
    lossy_mount.crash()
    assert tree(lossy_mount.path) == {"f": b"data"}
    lossy_mount.crash()  # what survived one crash is durable for the next
    assert tree(lossy_mount.path) == {"f": b"data"}


def test_a_durable_name_whose_data_was_never_synced_comes_back_empty(
    lossy_mount: LossyMount,
) -> None:
    put(lossy_mount.path / "f", b"data")
    sync_dir(lossy_mount.path)
    lossy_mount.crash()
    assert tree(lossy_mount.path) == {"f": b""}


def test_an_overwrite_of_a_synced_file_reverts_without_a_new_sync(
    lossy_mount: LossyMount,
) -> None:
    put(lossy_mount.path / "f", b"first", sync=True)
    put(lossy_mount.path / "g", b"first", sync=True)
    sync_dir(lossy_mount.path)
    put(lossy_mount.path / "f", b"second, longer")
    put(lossy_mount.path / "g", b"second, longer", sync=True)
    lossy_mount.crash()
    assert tree(lossy_mount.path) == {"f": b"first", "g": b"second, longer"}


@pytest.mark.parametrize("synced", [False, True], ids=["dir-unsynced", "dir-synced"])
def test_a_rename_is_durable_only_with_its_directory(lossy_mount: LossyMount, synced: bool) -> None:
    put(lossy_mount.path / "a", b"data", sync=True)
    sync_dir(lossy_mount.path)
    (lossy_mount.path / "a").rename(lossy_mount.path / "b")
    if synced:
        sync_dir(lossy_mount.path)
    lossy_mount.crash()
    assert tree(lossy_mount.path) == ({"b": b"data"} if synced else {"a": b"data"})


@pytest.mark.parametrize(
    ("file_synced", "dir_synced", "expected"),
    [
        (False, False, {}),
        (True, False, {}),
        (False, True, {"00000000000000000000.json": b""}),
        (True, True, {"00000000000000000000.json": b'{"commitInfo":{}}\n'}),
    ],
    ids=["nothing-synced", "file-only", "dir-only", "file-and-dir"],
)
def test_the_stage_link_unlink_commit_of_delta_rs(
    lossy_mount: LossyMount, file_synced: bool, dir_synced: bool, expected: dict[str, bytes]
) -> None:
    # delta-rs's local store: the entry written to a staging name, hard-linked into place
    # (which fails if the version exists), the staging name unlinked
    log = lossy_mount.path / "_delta_log"
    log.mkdir()
    sync_dir(lossy_mount.path)
    staged, entry = log / ".tmp_00000000000000000000.json", log / "00000000000000000000.json"
    put(staged, b'{"commitInfo":{}}\n', sync=file_synced)
    os.link(staged, entry)
    staged.unlink()
    if dir_synced:
        sync_dir(log)
    lossy_mount.crash()
    assert tree(log) == expected


@pytest.mark.parametrize(
    "synced", [("", "a", "a/b", "a/b/c"), ("a", "a/b", "a/b/c"), ("", "a/b", "a/b/c"), ("", "a")]
)
def test_a_directory_chain_is_durable_only_where_each_parent_was_synced(
    lossy_mount: LossyMount, synced: tuple[str, ...]
) -> None:
    root = lossy_mount.path
    (root / "a" / "b" / "c").mkdir(parents=True)
    put(root / "a" / "b" / "c" / "f", b"data", sync=True)
    for directory in synced:
        sync_dir(root / directory)
    lossy_mount.crash()
    # a name survives when every directory above it, and the one holding it, was synced
    expected: dict[str, bytes | None] = {}
    for holder, name, content in [("", "a", None), ("a", "b", None), ("a/b", "c", None)]:
        if holder not in synced:
            break
        expected[str(Path(holder) / name)] = content
    else:
        if "a/b/c" in synced:
            expected["a/b/c/f"] = b"data"
    assert tree(root) == expected


def test_a_hard_linked_file_is_one_file_after_a_crash(lossy_mount: LossyMount) -> None:
    root = lossy_mount.path
    put(root / "a", b"shared", sync=True)
    os.link(root / "a", root / "b")
    sync_dir(root)
    put(root / "b", b"shared, synced through b", sync=True)
    lossy_mount.crash()
    assert tree(root) == {"a": b"shared, synced through b", "b": b"shared, synced through b"}
    assert (root / "a").stat().st_ino == (root / "b").stat().st_ino


def test_delta_rs_leaves_its_writes_unsynced_and_a_crash_drops_them(
    lossy_mount: LossyMount,
) -> None:
    table = str(lossy_mount.path / "table")
    rows = pa.table({"n": list(range(1000)), "s": [f"row {n}" for n in range(1000)]})
    write_deltalake(table, rows)
    write_deltalake(table, rows, mode="append")
    DeltaTable(table).create_checkpoint()
    assert DeltaTable(table).to_pyarrow_table().num_rows == 2000
    sync_tree(lossy_mount.path)  # what delta-rs never does: now all of it is durable
    write_deltalake(table, rows, mode="append")
    assert DeltaTable(table).version() == 2
    lossy_mount.crash()
    # the synced table opens whole; the append delta-rs left unsynced is gone
    reopened = DeltaTable(table)
    assert (reopened.version(), reopened.to_pyarrow_table().num_rows) == (1, 2000)
    write_deltalake(table, rows, mode="append")  # the table is writable after the crash
    assert DeltaTable(table).to_pyarrow_table().num_rows == 3000
    lossy_mount.crash()
    assert DeltaTable(table).version() == 1
    (lossy_mount.path / "other").mkdir()
    sync_dir(lossy_mount.path)
    write_deltalake(str(lossy_mount.path / "other"), rows)
    lossy_mount.crash()
    with pytest.raises(TableNotFoundError):
        DeltaTable(str(lossy_mount.path / "other"))


WRITER = textwrap.dedent(
    """
    import os, sys
    root = sys.argv[1]
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    n = 0
    while True:
        fd = os.open(os.path.join(root, f"record-{n}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        os.write(fd, f"record {n}".encode())
        os.fsync(fd)
        os.close(fd)
        os.fsync(directory)
        print(n, flush=True)  # acked: this record is durable
        n += 1
    """
)


def test_the_mount_outlives_a_sigkilled_writer_and_keeps_what_it_acked(
    lossy_mount: LossyMount,
) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(lossy_mount.path)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    acked = [int(writer.stdout.readline()) for _ in range(200)]
    writer.kill()
    writer.wait()
    acked += [int(line) for line in writer.stdout.read().split()]
    writer.stdout.close()
    assert list(lossy_mount.path.iterdir())  # still served
    lossy_mount.crash()
    kept = tree(lossy_mount.path)
    assert {f"record-{n}": f"record {n}".encode() for n in acked}.items() <= kept.items()
    # at most the one record in flight when it was killed is there unacked
    assert len(kept) - len(acked) <= 1
