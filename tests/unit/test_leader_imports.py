"""The leader keeps the landing table up but writes none of it: it imports neither delta-rs
nor pyarrow nor boto3 (70 MB and more before the first call); its upkeep runs them in a
child process (``adapters.delta._maintenance``)."""

from __future__ import annotations

import json
import subprocess
import sys

WRITERS_ONLY = ("deltalake", "pyarrow", "boto3", "pandas")


def test_the_leader_process_imports_no_table_writer_library() -> None:
    probe = (
        "import json, sys, services.leader.main;"
        f"print(json.dumps([m for m in {WRITERS_ONLY!r} if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_a_handler_does_import_them() -> None:
    """The probe above sees an import when there is one."""
    probe = (
        "import json, sys, services.handler.main;"
        f"print(json.dumps([m for m in {WRITERS_ONLY!r} if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert {"deltalake", "pyarrow"} <= set(json.loads(done.stdout.splitlines()[-1]))
