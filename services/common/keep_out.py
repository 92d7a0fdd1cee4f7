"""Keep packages a service process never uses out of it, where a library would import them
only because they are installed.

A service's entry point (``services/<name>/__main__.py``) calls ``keep_out`` before it
imports anything else; an import of a named package then fails as if it were not installed,
which the libraries that reach for it expect (each guards the import):

- pyarrow imports pandas on its first conversion of a Python value, only to ask whether
  the value is a pandas object (50 MB), and numpy when it is imported (11 MB);
- dependency-injector's wiring imports fastapi to recognise its markers (6 MB in a process
  that serves no FastAPI app), and its providers yaml for ``Configuration.from_yaml``.

Installed they are in a dev venv or with the spark extra (pandas, numpy), never needed by a
service: the images install neither pandas nor numpy.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["KeepOut", "keep_out"]


class KeepOut(MetaPathFinder):
    """Refuses the import of the top-level packages in ``reasons`` (name -> why not)."""

    def __init__(self, reasons: Mapping[str, str]) -> None:
        self.reasons = dict(reasons)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        top = fullname.partition(".")[0]
        if top in self.reasons:
            raise ModuleNotFoundError(
                f"{top} is kept out of this process: {self.reasons[top]}", name=fullname
            )
        return None


def keep_out(**reasons: str) -> None:
    """Make an import of each named top-level package fail in this process from now on."""
    sys.meta_path.insert(0, KeepOut(reasons))
