"""The two reasons a test may not run, kept apart so that CI never skips one silently.

- ``unavailable(what)``: the test cannot run *here* (a server, binary, jar, module, TLS
  material or a local server mode is missing). It skips on a developer's machine, and fails
  under ``CI`` (set by ``.ci/run``), which installs everything: there a skipped test would
  only hide that it proved nothing.
- ``not_applicable(reason)``: the check does not apply (a contract check an adapter does
  not offer, a Linux-only feature elsewhere). It skips everywhere, CI included; its reason
  starts with ``NOT_APPLICABLE`` so that tests/conftest.py can tell it from any other skip,
  which it turns into a failure under CI.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, NoReturn

import pytest

from infra.local._handles import RunningServer
from infra.local._testservers import ServerInfo

NOT_APPLICABLE = "does not apply: "


def under_ci() -> bool:
    return bool(os.environ.get("CI"))


def unavailable(what: str) -> NoReturn:
    """Skip, or under CI fail, a test that cannot run here; ``what`` names what is missing
    and how to get it. At module level too (the whole module cannot run)."""
    __tracebackhide__ = True  # reports name the caller's line, as pytest.skip's do
    if under_ci():
        # from None: the error that told what is missing (often being handled here) is in
        # the message already; its traceback would only bury it
        raise pytest.fail.Exception(f"cannot run under CI: {what}", pytrace=False) from None
    pytest.skip(what, allow_module_level=True)


def not_applicable(reason: str) -> NoReturn:
    """Skip a check that does not apply to what is under test (a skip under CI too)."""
    __tracebackhide__ = True
    pytest.skip(NOT_APPLICABLE + reason)


def applies_only_if(condition: bool, reason: str) -> pytest.MarkDecorator:
    """``not_applicable`` as a marker, for a test that applies only where ``condition``."""
    return pytest.mark.skipif(not condition, reason=NOT_APPLICABLE + reason)


def import_module(name: str, install: str) -> Any:
    """The module ``name`` (typed ``Any``: no stub package needed for mypy --strict), or
    ``unavailable`` naming ``install``, how to get it."""
    __tracebackhide__ = True
    try:
        return importlib.import_module(name)
    except ImportError:
        unavailable(f"the Python module {name} is not installed ({install})")


def needs_local(kind: str, mode: str, purpose: str) -> str:
    """Why a test that must ``purpose`` a ``kind`` server cannot run in server mode ``mode``
    (a Docker or external server is no process of the test run's own)."""
    return (
        f"the test must {purpose} the {kind} server, and SHOAL_TEST_SERVERS={mode} gives no"
        " local process of it (SHOAL_TEST_SERVERS=local does, as .ci/run sets it)"
    )


def local_process(server: ServerInfo, purpose: str) -> RunningServer:
    """The local process behind ``server``, for a test that must ``purpose`` it (kill it,
    restart it, read its monitoring port); ``unavailable`` in another server mode."""
    __tracebackhide__ = True
    if not isinstance(server.process, RunningServer):  # none, or a container
        unavailable(needs_local(server.kind, server.mode, purpose))
    return server.process
