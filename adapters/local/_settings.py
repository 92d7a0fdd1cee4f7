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
    """Settings of ``LocalProcessScaler``; each field's description says what it does
    (docs/settings.md is generated from them)."""

    model_config = SettingsConfigDict(env_prefix="SHOAL_LOCAL_", extra="ignore", frozen=True)

    log_dir: Path = Field(
        default=Path("var/log/handlers"),
        description="each child writes stdout and stderr to `{log_dir}/{handler id}.log`",
    )
    command: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="the child's command line, from the environment a JSON list or a "
        "shell-quoted string; empty: `python -m services.handler` with the leader's "
        "interpreter",
    )
    id_prefix: str = Field(
        default="handler",
        pattern=r"^[A-Za-z0-9_-]{1,32}$",
        description="child ids are `{id_prefix}-{token}-{n}`, `token` random per scaler, "
        "`n` counting from 1 (unique even across leader restarts)",
    )
    stop_timeout: float = Field(
        default=15.0,
        gt=0,
        description="seconds: after SIGTERM a child has this long to drain and exit before "
        "it gets SIGKILL (from its launcher, and from the scaler on its process group). Keep "
        "it above the handler's own bound (`SHOAL_HANDLER_DRAIN_TIMEOUT`, 8 s by default, "
        "plus its 5 s grace)",
    )
    cwd: Path | None = Field(
        default=None, description="the children's working directory; unset: the leader's"
    )

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
