"""What each service process imports, and what it does without.

The leader keeps the landing table up but writes none of it: it imports neither delta-rs nor
pyarrow nor boto3 (70 MB and more before the first call); its upkeep runs them in a child
process (``adapters.delta._maintenance``). A handler's entry point keeps pandas out, which
pyarrow would import (where installed) on its first conversion of a Python value, and numpy
and fastapi (``services.common.keep_out``). Libraries only some configurations use are
imported only by those: lightkube (the kubernetes scaler), jinja2 (the report page), httpx
(a NATS monitor URL, a leader's peers)."""

from __future__ import annotations

import json
import subprocess
import sys

WRITERS_ONLY = ("deltalake", "pyarrow", "boto3", "pandas")
SOME_CONFIGURATIONS_ONLY = ("lightkube", "jinja2", "httpx", "numpy", "fastapi")


def _imported_after(statements: str, watched: tuple[str, ...] = WRITERS_ONLY) -> set[str]:
    """Which of ``watched`` a fresh interpreter holds after ``statements``."""
    report = f"print(json.dumps([m for m in {watched!r} if sys.modules.get(m)]))"
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


def _entry_point(service: str) -> str:
    """Statements running ``python -m services.<service>``'s own lines, not the service."""
    return (
        "import sys, types\n"
        f"sys.modules['services.{service}.main'] = types.SimpleNamespace(main=lambda: None)\n"
        f"import runpy; runpy.run_module('services.{service}', run_name='__main__')\n"
        f"del sys.modules['services.{service}.main']\n"
        f"import services.{service}.main"
    )


def test_the_handler_entry_point_keeps_pandas_out() -> None:
    assert "pandas" not in _imported_after(f"{_entry_point('handler')}\n{CONVERT}")


def test_a_handler_imports_numpy_and_fastapi_only_where_installed_not_by_its_entry_point() -> None:
    watched = ("numpy", "fastapi")
    assert _imported_after("import services.handler.main", watched) == set(watched)
    assert _imported_after(f"{_entry_point('handler')}\n{CONVERT}", watched) == set()


def test_the_services_import_no_library_of_a_configuration_they_do_not_have() -> None:
    """Each: what it imports before its configuration is read."""
    expected = {"handler": set(), "gateway": {"fastapi"}, "leader": {"fastapi"}}
    for service, served in expected.items():
        found = _imported_after(_entry_point(service), SOME_CONFIGURATIONS_ONLY)
        assert found == served, service


def test_the_entry_points_keep_packages_out_as_if_not_installed() -> None:
    probe = (
        f"{_entry_point('handler')}\n"
        "try:\n    import numpy\nexcept ModuleNotFoundError as e:\n    print(e.name, str(e))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("numpy numpy is kept out of this process"), done.stdout
