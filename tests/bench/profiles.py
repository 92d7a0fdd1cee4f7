"""Where shoal's processes spend their CPU during a bench run: py-spy samples of running
processes (``--profile DIR`` of ``tests.bench.pipeline``) and their top frames.

py-spy reads a process's stacks from outside (ptrace: root, or
``kernel.yama.ptrace_scope=0``), without pausing it (``--nonblocking``), so the profiled
run's figures move little; it is a dev dependency. Each profile is written in py-spy's raw
(collapsed stack) format: one line per distinct stack, ``frame;frame;... samples``, which
flamegraph tools read; the summary is the frames that were on top of the stack (where the
CPU was spent, not what called it) as a share of every sample.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

SAMPLES_PER_SECOND = 100
# "function (path/to/file.py:123)": the line number is dropped so that a function's samples
# add up wherever in it they fell.
_LINE = re.compile(r":\d+\)$")


def py_spy() -> str:
    """The py-spy beside this interpreter, or on PATH; exits naming the extra when neither."""
    found = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if found is None:
        raise SystemExit("error: --profile needs py-spy (pip install -e '.[dev]')")
    return found


@contextmanager
def profiled(out: Path, pids: Mapping[str, int]) -> Iterator[dict[str, Path]]:
    """Sample each named process while the block runs; yields name -> raw profile path,
    each written once the block is left."""
    out.mkdir(parents=True, exist_ok=True)
    binary = py_spy()
    paths = {name: out / f"{name}.txt" for name in pids}
    samplers = [
        subprocess.Popen(
            [
                binary,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(SAMPLES_PER_SECOND),
                "--nonblocking",
                "--format",
                "raw",
                "--output",
                str(paths[name]),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    ]
    try:
        yield paths
    finally:
        # py-spy writes its profile when interrupted (or when its process exits).
        for sampler in samplers:
            sampler.send_signal(signal.SIGINT)
        for sampler in samplers:
            try:
                sampler.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sampler.kill()


def top_frames(profiles: Iterable[Path], count: int = 10) -> list[tuple[str, float]]:
    """The ``count`` frames most often on top of the stack across ``profiles`` (the
    processes of one role added up), each with its share of all their samples."""
    on_top: Counter[str] = Counter()
    for profile in profiles:
        if not profile.exists():
            continue
        for line in profile.read_text().splitlines():
            stack, _, samples = line.rpartition(" ")
            if not stack or not samples.isdigit():
                continue
            on_top[_LINE.sub(")", stack.rpartition(";")[2])] += int(samples)
    total = sum(on_top.values())
    return [(frame, n / total) for frame, n in on_top.most_common(count)] if total else []
