"""lossyfs: a FUSE passthrough that loses what was never synced, for power-cut tests.

It plays a disk with a volatile page cache (LazyFS's "clear cache", which Debian and PyPI
do not ship): every operation works at once through the mount, and a crash keeps only what
was made durable, as a power cut would.

Durability model (the durable state is what a crash keeps; identity is by inode, so one
file under two names after a hard link is one file):

- Everything present when the file system is first started is durable.
- A file's *data* becomes durable at fsync or fdatasync of that file: its whole content at
  that moment. Later writes are not durable until the next fsync.
- A directory's *entries* (name -> inode: a new file's or subdirectory's name, a rename's
  new name and its old name gone, an unlink, a hard link's new name) become durable at
  fsync of that directory (``os.fsync`` on an ``O_DIRECTORY`` descriptor; FUSE's
  fsyncdir). Nothing else syncs a directory: not fsync of a file in it, not ``sync``.
- A crash rebuilds the tree from the durable state alone: each directory reachable from
  the root by durable entries, with its durable entries; each file with its durable data.
  A durable name whose inode never had its data synced comes back empty (ext4's
  zero-length files after a crash); a name or inode never made durable is gone.

So ``write + fsync(file)`` of a new file without ``fsync(dir)`` loses the file,
``rename(a, b)`` without fsync of the directory keeps ``a``, and ``link(tmp, N.json);
unlink(tmp)`` without it loses ``N.json``.

How: ``BACKING/live`` is a real directory that the mount serves as a passthrough (one
thread: requests are handled in order, so no operation sees another half done);
``BACKING/durable`` holds the durable state, ``dirs/<node>.json`` (a directory's durable
entries) and ``data/<node>`` (a file's durable data), where a node is this file system's
own id of an inode (inode numbers are reused, these ids never). The server process keeps
nothing durable in memory, so killing it is a power cut, and starting it again is the
reboot: it rebuilds ``live`` from ``durable`` before it mounts (after any stop: an
unmount loses what was not synced, too).

    python -m tests._lossyfs BACKING MOUNTPOINT     # serves in the foreground; ^C unmounts

Tests use ``LossyMount`` (the server in a child process, so a writer under test can be
SIGKILLed while the file system lives on) and its ``crash()``.

A file's mode and times come back as they were at its last fsync, a directory's mode as it
was at its parent's.

Limits: regular files, directories and symbolic links (no device, FIFO or socket nodes);
no extended attributes; locks are the kernel's local ones. An fsync copies the whole file,
so a file fsynced after each small append costs its size each time. A process that has the
mount open when it crashes sees errors (ENOTCONN) on those descriptors: kill writers first,
as a power cut would.
"""

from __future__ import annotations

import argparse
import ctypes.util
import errno
import importlib
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LossyMount", "missing"]

ROOT = 0  # the node of the file system's root directory
FILE, DIR, SYMLINK = "file", "dir", "symlink"
# utimensat's special nanosecond values, which libfuse passes on as they are
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
REPO = Path(__file__).resolve().parents[1]


# --- the durable state ------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """A durable directory entry: the node it names, its kind, its mode, a link's target."""

    node: int
    kind: str
    mode: int
    target: str | None = None


class Store:
    """The durable state on disk. Each write is a new file renamed into place, so that a
    server killed half-way through one leaves the state before it (the backing disk itself
    does not crash: only this file system does)."""

    def __init__(self, root: Path) -> None:
        self.dirs = root / "dirs"
        self.data = root / "data"

    def exists(self) -> bool:
        # the root's entries are written last when the state is first made
        return (self.dirs / f"{ROOT}.json").exists()

    def reset(self) -> None:
        for part in (self.dirs, self.data):
            shutil.rmtree(part, ignore_errors=True)
            part.mkdir(parents=True)

    def entries(self, node: int) -> dict[str, Entry]:
        try:
            raw = json.loads((self.dirs / f"{node}.json").read_text())
        except FileNotFoundError:
            return {}  # a directory whose own entries were never synced comes back empty
        return {name: Entry(*fields) for name, fields in raw.items()}

    def set_entries(self, node: int, entries: dict[str, Entry]) -> None:
        raw = {name: [e.node, e.kind, e.mode, e.target] for name, e in entries.items()}
        tmp = self.dirs / f"{node}.json.tmp"
        tmp.write_text(json.dumps(raw))
        tmp.replace(self.dirs / f"{node}.json")

    def data_of(self, node: int) -> Path | None:
        path = self.data / str(node)
        return path if path.exists() else None

    def save_data(self, node: int, fd: int) -> None:
        """The whole current content of the open file ``fd`` (with its mode and times)."""
        st = os.fstat(fd)
        tmp = self.data / f"{node}.tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _copy(fd, out, st.st_size)
            os.fchmod(out, stat.S_IMODE(st.st_mode))
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(out)
        tmp.replace(self.data / str(node))

    def keep_only(self, nodes: set[int]) -> None:
        """Forget every node a crash made unreachable (and any write a kill cut short)."""
        for part in (self.dirs, self.data):
            for path in part.iterdir():
                name = path.name.removesuffix(".json")
                if not name.isdigit() or int(name) not in nodes:
                    path.unlink()


def _copy(src: int, dst: int, size: int) -> None:
    offset = 0
    while offset < size:
        try:  # in the kernel, without a round trip through Python
            done = os.copy_file_range(src, dst, size - offset, offset)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            chunk = os.pread(src, min(size - offset, 1 << 20), offset)
            done = os.write(dst, chunk)
        if done == 0:
            break  # the file is shorter than it was
        offset += done


def _kind(st: os.stat_result) -> str | None:
    if stat.S_ISREG(st.st_mode):
        return FILE
    if stat.S_ISDIR(st.st_mode):
        return DIR
    if stat.S_ISLNK(st.st_mode):
        return SYMLINK
    return None  # no other kind can be made through the mount


def adopt(live: Path, store: Store) -> dict[int, int]:
    """First start: everything in ``live`` becomes durable. Returns inode -> node."""
    store.reset()
    nodes: dict[int, int] = {live.stat().st_ino: ROOT}
    root: dict[str, Entry] = {}
    todo = [live]
    while todo:
        directory = todo.pop()
        entries: dict[str, Entry] = {}
        for path in directory.iterdir():
            st = path.lstat()
            kind = _kind(st)
            if kind is None:
                continue
            known = st.st_ino in nodes  # a second name of a hard-linked file
            node = nodes.setdefault(st.st_ino, len(nodes))
            target = str(path.readlink()) if kind == SYMLINK else None
            entries[path.name] = Entry(node, kind, stat.S_IMODE(st.st_mode), target)
            if kind == DIR:
                todo.append(path)
            elif kind == FILE and not known:
                fd = os.open(path, os.O_RDONLY)
                try:
                    store.save_data(node, fd)
                finally:
                    os.close(fd)
        if directory == live:
            root = entries
        else:
            store.set_entries(nodes[directory.stat().st_ino], entries)
    store.set_entries(ROOT, root)  # last: the root's entries mark the state complete
    return nodes


def rebuild(live: Path, store: Store) -> dict[int, int]:
    """The reboot after a crash: replace ``live`` by the tree the durable state holds.
    Returns inode -> node for the new tree."""
    new = live.with_name(live.name + ".rebuilt")
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir()
    nodes = {new.stat().st_ino: ROOT}
    placed: dict[int, Path] = {}  # file node -> its first name (the others are hard links)
    kept: dict[int, dict[str, Entry]] = {}  # what each rebuilt directory holds
    dirs = {ROOT}
    todo = [(ROOT, new)]
    while todo:
        node, directory = todo.pop()
        kept[node] = {}
        for name, entry in store.entries(node).items():
            path = directory / name
            if entry.kind == DIR:
                # Entries synced at different times can name one directory twice (renamed,
                # both parents synced) or in a cycle: a directory gets one name, the first.
                if entry.node in dirs:
                    continue
                dirs.add(entry.node)
                path.mkdir()
                path.chmod(entry.mode)
                todo.append((entry.node, path))
            elif entry.kind == SYMLINK:
                path.symlink_to(entry.target or "")
            elif entry.node in placed:
                path.hardlink_to(placed[entry.node])
            else:
                data = store.data_of(entry.node)
                if data is None:  # a durable name whose data never was: an empty file
                    path.touch(entry.mode)
                    path.chmod(entry.mode)
                else:
                    shutil.copy2(data, path)
                placed[entry.node] = path
            nodes[path.lstat().st_ino] = entry.node
            kept[node][name] = entry
    old = live.with_name(live.name + ".crashed")
    shutil.rmtree(old, ignore_errors=True)
    if live.exists():
        live.rename(old)
    new.rename(live)  # inode numbers stay what they were in `new`
    shutil.rmtree(old, ignore_errors=True)
    # The rebuilt tree is now the durable state: what it dropped is forgotten.
    for node, entries in kept.items():
        store.set_entries(node, entries)
    store.keep_only(set(kept) | set(placed))
    return nodes


# --- the file system --------------------------------------------------------------------


class LossyOperations:
    """mfusepy's operations: a passthrough to ``live`` that records durable state at fsync.
    Paths are absent (None) where a file handle is given (libfuse's nullpath_ok): every
    handle is a real descriptor of ``live``, so identity goes by inode, never by name."""

    use_ns = True  # times as integer nanoseconds
    flag_nopath = flag_nullpath_ok = True  # both: mfusepy then sets libfuse's nullpath_ok

    def __init__(self, live: Path, store: Store, nodes: dict[int, int]) -> None:
        self.live = str(live)
        self.store = store
        self.nodes = nodes
        self.next_node = max(nodes.values(), default=ROOT) + 1

    def _path(self, path: str | None) -> str:
        if path is None:
            raise OSError(errno.ENOENT, "no path")
        return self.live + path

    def _new_node(self, full: str) -> None:
        """Give the inode just made at ``full`` a fresh node (its number may be reused)."""
        self.nodes[os.lstat(full).st_ino] = self.next_node
        self.next_node += 1

    def _node(self, ino: int) -> int:
        if ino not in self.nodes:  # cannot happen: every inode is adopted, rebuilt or made here
            self.nodes[ino] = self.next_node
            self.next_node += 1
        return self.nodes[ino]

    # metadata
    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, int]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._path(path))
        return {
            "st_mode": st.st_mode,
            "st_ino": st.st_ino,
            "st_nlink": st.st_nlink,
            "st_uid": st.st_uid,
            "st_gid": st.st_gid,
            "st_size": st.st_size,
            "st_blocks": st.st_blocks,
            "st_blksize": st.st_blksize,
            "st_atime": st.st_atime_ns,
            "st_mtime": st.st_mtime_ns,
            "st_ctime": st.st_ctime_ns,
        }

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self.live)
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files")
        return {key: getattr(sv, key) for key in (*keys, "f_ffree", "f_favail", "f_namemax")}

    def chmod(self, path: str | None, mode: int) -> int:
        os.chmod(self._path(path), mode)
        return 0

    def chown(self, path: str | None, uid: int, gid: int) -> int:
        os.lchown(self._path(path), uid, gid)
        return 0

    def utimens(self, path: str | None, atime: tuple[int, int], mtime: tuple[int, int]) -> int:
        full = self._path(path)
        st = os.lstat(full)
        now = time.time_ns()

        def resolved(spec: tuple[int, int], current: int) -> int:
            sec, nsec = spec
            if nsec == UTIME_NOW:
                return now
            return current if nsec == UTIME_OMIT else sec * 10**9 + nsec

        times = (resolved(atime, st.st_atime_ns), resolved(mtime, st.st_mtime_ns))
        os.utime(full, ns=times, follow_symlinks=False)
        return 0

    def readlink(self, path: str | None) -> str:
        return os.readlink(self._path(path))

    # files
    def create(self, path: str | None, mode: int, flags: int) -> int:
        full = self._path(path)
        existed = os.path.lexists(full)
        fd = os.open(full, _backing_flags(flags) | os.O_CREAT, mode)
        if not existed:
            self._new_node(full)
        return fd

    def mknod(self, path: str | None, mode: int, dev: int) -> int:
        if not stat.S_ISREG(mode):
            raise OSError(errno.EPERM, "lossyfs holds regular files, directories and links")
        os.close(self.create(path, stat.S_IMODE(mode), os.O_WRONLY | os.O_EXCL))
        return 0

    def open(self, path: str | None, flags: int) -> int:
        return os.open(self._path(path), _backing_flags(flags))

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        return os.pwrite(fh, data, offset)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._path(path), length)
        return 0

    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
        if mode != 0:
            raise OSError(errno.EOPNOTSUPP, "only plain fallocate")
        os.posix_fallocate(fh, offset, size)
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0

    def release(self, path: str | None, fh: int) -> int:
        os.close(fh)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        # fdatasync too: a file's data is its content; its size and mode come with it.
        # The handle may be write-only: the copy reads the inode through /proc (an unlinked
        # file's too).
        src = os.open(f"/proc/self/fd/{fh}", os.O_RDONLY)
        try:
            self.store.save_data(self._node(os.fstat(src).st_ino), src)
        finally:
            os.close(src)
        return 0

    # the namespace
    def mkdir(self, path: str | None, mode: int) -> int:
        full = self._path(path)
        os.mkdir(full, mode)
        self._new_node(full)
        return 0

    def rmdir(self, path: str | None) -> int:
        os.rmdir(self._path(path))
        return 0

    def unlink(self, path: str | None) -> int:
        os.unlink(self._path(path))
        return 0

    def rename(self, old: str | None, new: str | None, flags: int = 0) -> int:
        source, target = self._path(old), self._path(new)
        # renameat2's flags, which os.rename cannot pass: one request at a time, so the
        # check and the rename are one step for the mount's users
        if flags & ~1:  # RENAME_EXCHANGE, RENAME_WHITEOUT
            raise OSError(errno.EINVAL, "lossyfs renames with RENAME_NOREPLACE at most")
        if flags & 1 and os.path.lexists(target):  # RENAME_NOREPLACE
            raise OSError(errno.EEXIST, "exists")
        os.rename(source, target)
        return 0

    def link(self, new: str | None, existing: str | None) -> int:
        os.link(self._path(existing), self._path(new))
        return 0

    def symlink(self, new: str | None, target: str) -> int:
        full = self._path(new)
        os.symlink(target, full)
        self._new_node(full)
        return 0

    # directories: a handle is a descriptor of the directory
    def opendir(self, path: str | None) -> int:
        return os.open(self._path(path), os.O_RDONLY | os.O_DIRECTORY)

    def readdir(self, path: str | None, fh: int) -> list[tuple[str, dict[str, int], int]]:
        # Each entry's inode and type: with use_ino libfuse passes on the inode given here,
        # and readdir(3) skips an entry of inode 0.
        listing = [
            (name, {"st_ino": os.stat(name, dir_fd=fh).st_ino, "st_mode": stat.S_IFDIR}, 0)
            for name in (".", "..")
        ]
        with os.scandir(fh) as entries:
            for entry in entries:  # the type from the directory itself, no stat per entry
                if entry.is_dir(follow_symlinks=False):
                    kind = stat.S_IFDIR
                else:
                    kind = stat.S_IFLNK if entry.is_symlink() else stat.S_IFREG
                listing.append((entry.name, {"st_ino": entry.inode(), "st_mode": kind}, 0))
        return listing

    def releasedir(self, path: str | None, fh: int) -> int:
        os.close(fh)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        entries = {}
        for name in os.listdir(fh):
            st = os.stat(name, dir_fd=fh, follow_symlinks=False)
            kind = _kind(st)
            if kind is not None:
                target = os.readlink(name, dir_fd=fh) if kind == SYMLINK else None
                entries[name] = Entry(self._node(st.st_ino), kind, stat.S_IMODE(st.st_mode), target)
        self.store.set_entries(self._node(os.fstat(fh).st_ino), entries)
        return 0


def _backing_flags(flags: int) -> int:
    # The kernel gives each write its offset (O_APPEND's included), which pwrite must keep;
    # O_DIRECT would need aligned buffers. Neither changes what the mount's users see.
    return flags & ~(os.O_APPEND | os.O_DIRECT)


def _fuse_class(mfusepy: Any) -> Any:
    """mfusepy's FUSE, passing renameat2's flags (it drops them: a RENAME_NOREPLACE would
    replace) and utimensat's raw times (it turns UTIME_NOW and UTIME_OMIT into dates)."""

    class Fuse(mfusepy.FUSE):  # type: ignore[misc]  # mfusepy has no type information
        def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
            result: int = self.operations.rename(os.fsdecode(old), os.fsdecode(new), flags)
            return result

        def utimens_fuse_3(self, path: bytes | None, buf: Any, fip: Any) -> int:
            if buf:
                times = buf.contents.actime, buf.contents.modtime
                atime, mtime = ((t.tv_sec, t.tv_nsec) for t in times)
            else:
                atime = mtime = (0, UTIME_NOW)
            decoded = None if path is None else os.fsdecode(path)
            result: int = self.operations.utimens(decoded, atime, mtime)
            return result

    return Fuse


def serve(backing: Path, mountpoint: Path) -> None:
    """Start (or, after a kill, reboot) the file system and serve it until unmounted."""
    live = backing / "live"
    store = Store(backing / "durable")
    if store.exists():
        nodes = rebuild(live, store)
    else:
        live.mkdir(parents=True, exist_ok=True)
        nodes = adopt(live, store)
    mfusepy = importlib.import_module("mfusepy")
    _fuse_class(mfusepy)(
        LossyOperations(live, store, nodes),
        str(mountpoint),
        foreground=True,
        nothreads=True,  # one request at a time: see the module's doc
        hard_remove=True,  # an unlinked open file keeps no hidden name in its directory
        use_ino=True,  # the backing inode numbers: a hard link's names show one inode
        # libfuse's high-level API gives the kernel one inode per name: cached attributes
        # of a hard link's other name would lag a write for up to a second
        attr_timeout=0,
        fsname="lossyfs",
    )


def _exit_with(parent: int) -> None:
    """SIGTERM this process (libfuse then unmounts) once ``parent`` is gone, so that a test
    run killed outright leaves no mount behind."""

    def watch() -> None:
        # libfuse's handlers must run on the serving thread, where they interrupt its read
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests._lossyfs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("backing", type=Path, help="holds live/ and durable/")
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("--parent", type=int, help="unmount when this process ends")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="lossyfs: %(levelname)s %(message)s")
    if args.parent is not None:
        _exit_with(args.parent)
    try:
        serve(args.backing.resolve(), args.mountpoint.resolve())
    except RuntimeError as exc:
        if exc.args != (8,):  # fuse_main's 8: its loop ended by a signal (SIGTERM: unmount)
            raise


# --- the test API -----------------------------------------------------------------------


def missing() -> str | None:
    """What this machine lacks to mount lossyfs, with how to get it; None when nothing."""
    if not Path("/dev/fuse").exists():
        return "/dev/fuse is missing (the kernel's fuse module, or a container without it)"
    if shutil.which("fusermount3") is None or ctypes.util.find_library("fuse3") is None:
        return "fusermount3 or libfuse3 is missing (bash infra/local/install.sh fuse)"
    if importlib.util.find_spec("mfusepy") is None:
        return "the Python module mfusepy is missing (pip install -e '.[dev]')"
    return None


def _mounted(path: Path) -> bool:
    """Whether ``path`` is a mount point, a dead one (its server gone) included, which
    ``os.path.ismount`` cannot stat."""
    with Path("/proc/self/mountinfo").open() as mounts:
        for line in mounts:
            # mountinfo escapes space, tab, newline and backslash as octal
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4])
            if point == str(path):
                return True
    return False


class LossyMount:
    """lossyfs at ``mountpoint`` over ``backing``, served by a child process.

    ``crash()`` is the power cut and the reboot: the server is SIGKILLed (what it did not
    make durable is lost with it), the dead mount detached, and a new server rebuilds the
    tree from the durable state and mounts it at the same path. Every method returns once
    the mount serves (or is gone); ``unmount()`` always leaves no mount behind.
    """

    START_TIMEOUT = 30.0

    def __init__(self, backing: Path, mountpoint: Path) -> None:
        self.backing = backing.resolve()
        self.path = mountpoint.resolve()
        self.log = self.backing / "lossyfs.log"
        self._server: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LossyMount:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unmount()

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("lossyfs is mounted already")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.path.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "tests._lossyfs", str(self.backing), str(self.path)]
        with self.log.open("ab") as log:
            self._server = subprocess.Popen(
                [*command, "--parent", str(os.getpid())],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_mounted()
        except BaseException:
            self.unmount()
            raise

    def _wait_mounted(self) -> None:
        assert self._server is not None
        deadline = time.monotonic() + self.START_TIMEOUT
        while not os.path.ismount(self.path):
            if self._server.poll() is not None:
                raise RuntimeError(f"lossyfs exited ({self._server.returncode}): {self._tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"lossyfs not mounted in {self.START_TIMEOUT} s: {self._tail()}")
            time.sleep(0.01)
        self.path.stat()  # answered by the new server: it serves

    def crash(self) -> None:
        """Drop everything not made durable, as a power cut; the mount serves again after."""
        self._stop(signal.SIGKILL)
        self.start()

    def unmount(self) -> None:
        """Unmount (lazily if busy) and stop the server; safe to call more than once."""
        self._stop(signal.SIGTERM)  # libfuse's handler unmounts, lazily, and exits

    def _stop(self, how: signal.Signals) -> None:
        server, self._server = self._server, None
        try:
            if server is not None and server.poll() is None:
                server.send_signal(how)
                try:
                    server.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
        finally:
            if _mounted(self.path):  # a killed server leaves its mount dead, not gone
                subprocess.run(["fusermount3", "-u", "-z", str(self.path)], check=True)

    def _tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


if __name__ == "__main__":
    main()
