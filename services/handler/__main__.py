import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from typing import Any


class _WithoutPandas(MetaPathFinder):
    """pyarrow imports pandas, where it is installed (the spark extra: ``shoal up``, a dev
    venv), on its first conversion of a Python value, only to ask whether the value is a
    pandas object: 50 MB of a handler's memory for nothing (the handler image has no pandas).
    Here its import fails as if it were not installed."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError("pandas is not used by a handler", name=name)
        return None


sys.meta_path.insert(0, _WithoutPandas())

from services.handler.main import main  # noqa: E402 (after the finder above)

main()
