"""What each service process imports, and what it does without.

The leader keeps the landing table up but writes none of it: it imports neither delta-rs nor
pyarrow nor boto3 (70 MB and more before the first call); its upkeep runs them in a child
process (``adapters.delta._maintenance``). A handler's entry point keeps pandas out, which
pyarrow would import (where installed) on its first conversion of a Python value."""

from __future__ import annotations

import json
import subprocess
import sys

WRITERS_ONLY = ("deltalake", "pyarrow", "boto3", "pandas")


def _imported_after(statements: str) -> set[str]:
    """Which of ``WRITERS_ONLY`` a fresh interpreter holds after ``statements``."""
    report = f"print(json.dumps([m for m in {WRITERS_ONLY!r} if sys.modules.get(m)]))"
    probe = f"import json, sys\n{statements}\n{report}"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_leader_process_imports_no_table_writer_library() -> None:
    assert _imported_after("import services.leader.main") == set()


def test_a_handler_imports_the_writers_libraries() -> None:
    """The probe sees an import when there is one."""
    assert {"deltalake", "pyarrow"} <= _imported_after("import services.handler.main")


CONVERT = "import pyarrow as pa\npa.array([1, 2, 3])"


def test_pyarrow_imports_pandas_on_a_conversion_where_it_is_installed() -> None:
    assert "pandas" in _imported_after(CONVERT)


def test_the_handler_entry_point_keeps_pandas_out() -> None:
    entry = (
        "import runpy, services.handler.main as handler\n"
        "handler.main = lambda: None  # the entry point's own lines, not a handler run\n"
        "runpy.run_module('services.handler', run_name='__main__')"
    )
    assert "pandas" not in _imported_after(f"{entry}\n{CONVERT}")
