"""``LocalScalerSettings``: how ``LocalProcessScaler`` runs handlers (prefix ``SHOAL_LOCAL_``)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["LocalScalerSettings", "default_command"]


def default_command() -> tuple[str, ...]:
    """``python -m services.handler`` with the interpreter running the leader."""
    return (sys.executable, "-m", "services.handler")


class LocalScalerSettings(BaseSettings):
    """Settings of ``LocalProcessScaler``.

    - ``log_dir``: each child writes stdout and stderr to ``{log_dir}/{handler id}.log``.
    - ``command``: the child's command line; empty means ``python -m services.handler``.
      From the environment a JSON list or a shell-quoted string.
    - ``id_prefix``: child ids are ``{id_prefix}-{token}-{n}``, ``token`` random per
      scaler, ``n`` counting from 1 (unique even across leader restarts).
    - ``stop_timeout``: after SIGTERM a child has this long to drain and exit before it
      gets SIGKILL (from its launcher, and from the scaler on its process group). Keep
      it above the handler's own bound (``SHOAL_HANDLER_DRAIN_TIMEOUT``, 8 s by default,
      plus its 5 s grace).
    - ``cwd``: the children's working directory (default: the leader's).
    """

    model_config = SettingsConfigDict(env_prefix="SHOAL_LOCAL_", extra="ignore", frozen=True)

    log_dir: Path = Path("var/log/handlers")
    command: Annotated[tuple[str, ...], NoDecode] = ()
    id_prefix: str = Field(default="handler", pattern=r"^[A-Za-z0-9_-]{1,32}$")
    stop_timeout: float = Field(default=15.0, gt=0)
    cwd: Path | None = None

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return tuple(json.loads(text))
            return tuple(shlex.split(text))
        return value

    def argv(self) -> tuple[str, ...]:
        return self.command or default_command()
