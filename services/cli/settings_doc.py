"""docs/settings.md, generated from the settings classes the services read.

    python -m services.cli.settings_doc            # write docs/settings.md
    python -m services.cli.settings_doc --check    # exit 1 (and print a diff) when it is stale

One markdown table per pydantic-settings class (``SECTIONS``): the environment variable
(the class's ``env_prefix`` and the field's name upper-cased; a ``validation_alias`` names
its variables instead; a secret of ``ConnectionSecurity._SECRETS`` shares its row with its
``_FILE`` twin), the type with its bounds, the default, and the field's ``description``.
What a row says is written once, in the field; the section intros below are the only prose
kept here. Defaults are rendered stably: a ``default_factory`` whose value depends on the
machine names itself with ``json_schema_extra={"default_text": ...}`` (the ids:
``gw-{host}-{pid}``), and any other factory must give an empty container or composed
settings (whose variables are their own class's).

It lives in ``services.cli`` because it imports every service's settings (the gateway's,
the handler's, the leader's) and every adapter's: the layer that may see all of them.
"""

from __future__ import annotations

import argparse
import difflib
import enum
import json
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import AliasChoices, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from adapters._credentials import ConnectionSecurity
from adapters.delta import TableSettings
from adapters.etcd import EtcdSettings
from adapters.kafka import KafkaKvSettings, KafkaSettings
from adapters.kubernetes import KubernetesSettings
from adapters.local import LocalScalerSettings
from adapters.nats import NatsSettings
from adapters.natskv import NatsKvSettings
from adapters.parquet import ParquetSettings
from adapters.redis import RedisSettings
from adapters.s3 import S3Settings
from adapters.spark._settings import SparkSettings
from services.common.settings import (
    GatewaySettings,
    HandlerSettings,
    LeaderSettings,
    RoutingSettings,
    ShoalSettings,
)
from services.leader.settings import AutoscalingSettings, TableUpkeepSettings

__all__ = ["DOC_PATH", "SECTIONS", "Section", "main", "render"]

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
COMMAND = "python -m services.cli.settings_doc"

# The prefix ConnectionSecurity's rows are shown under: each backend's own.
BACKEND_PREFIX = "SHOAL_<BACKEND>_"


@dataclass(frozen=True)
class Section:
    """One class, one table: a heading, a few lines of prose above the table."""

    title: str
    settings: type[BaseSettings]
    intro: str = ""


_TLS = "Credentials and TLS: `{prefix}TLS*` as in [Credentials and TLS](#credentials-and-tls)"

SECTIONS: tuple[Section, ...] = (
    Section(
        "Every service",
        ShoalSettings,
        "Read by the gateway, the handlers and the leader alike. Every process of one group "
        "must be given the same `SHOAL_CONSUMPTION_MODE` (the modes: "
        "[operations.md](operations.md#consumption-modes)).",
    ),
    Section(
        "Multi-datacenter routing",
        RoutingSettings,
        "Off unless `SHOAL_CLUSTERS` is set; NATS JetStream only (docs/architecture.md, "
        '"Multi-datacenter routing"). `SHOAL_NATS_REFUSE_WHILE_DISCONNECTED` '
        "([NATS JetStream](#nats-jetstream)) is set for every per-cluster connection.",
    ),
    Section("Gateway", GatewaySettings),
    Section("Handler", HandlerSettings),
    Section("Leader", LeaderSettings),
    Section(
        "Leader: the landing table's upkeep",
        TableUpkeepSettings,
        "Read by the leader beside `LeaderSettings`; the upkeep itself is tuned by "
        "[`SHOAL_TABLE_*`](#landing-table).",
    ),
    Section("Autoscaling, in the leader", AutoscalingSettings),
    Section(
        "Local scaler",
        LocalScalerSettings,
        "With `SHOAL_SCALING_SCALER=local`: the active leader starts handler processes on "
        "its machine.",
    ),
    Section(
        "Kubernetes scaler",
        KubernetesSettings,
        "With `SHOAL_SCALING_SCALER=kubernetes`: the active leader reads and sets the "
        "handler Deployment's `scale` subresource.",
    ),
    Section(
        "Credentials and TLS",
        ConnectionSecurity,
        "Every server connection can log in and use TLS (`adapters/_credentials.py` holds "
        "the shared rules; each backend's settings add its own). `<BACKEND>` is `ETCD`, "
        "`REDIS`, `NATS` or `KAFKA`: these rows are every one of those sections' too. "
        "Secrets are never logged nor shown in a settings repr; connection log lines and "
        "errors name the server and the user only.\n\n"
        "**Every secret has a `_FILE` twin**: `SHOAL_ETCD_PASSWORD_FILE=/run/secrets/"
        "etcd-password` names a file whose content (stripped of surrounding whitespace) is "
        "the secret, which is how a Kubernetes Secret mounted as a volume is read. The file "
        "is read at start-up (to fail early) and again on every connect (a rotated secret "
        "is picked up on reconnect). Setting both a secret and its file is an error.\n\n"
        "Any TLS file switches TLS on. The server's certificate and host name are always "
        "verified. A half-configured connection (a user without a password, a certificate "
        "without its key, a TLS or secret file that is not there or is empty, SASL "
        "credentials with `PLAINTEXT`) exits at start-up with status 2 and "
        "`error: SHOAL_X_Y: ...`, before anything connects.",
    ),
    Section(
        "etcd",
        EtcdSettings,
        "With `SHOAL_COORDINATION=etcd`. " + _TLS.format(prefix="SHOAL_ETCD_") + ": gRPC "
        "needs `SHOAL_ETCD_TLS_CA_FILE` for TLS.",
    ),
    Section(
        "Redis",
        RedisSettings,
        "With `SHOAL_COORDINATION=redis`. " + _TLS.format(prefix="SHOAL_REDIS_") + ", or a "
        "`rediss://` URL; `SHOAL_REDIS_TLS_SERVER_NAME` is not offered (redis-py): the "
        "server's certificate must name the URL's host.",
    ),
    Section(
        "NATS JetStream",
        NatsSettings,
        "With `SHOAL_TRANSPORT=nats`, and for the NATS KV coordination (its connection). "
        + _TLS.format(prefix="SHOAL_NATS_")
        + ", or `tls://` URLs. One kind of credentials at most: user and password, a token, "
        "an nkey seed file or a `.creds` file. A refused login fails at once (`error: NATS "
        "at ... refused the login: nats: 'Authorization Violation'`), not after the "
        "connect timeout.",
    ),
    Section(
        "NATS KV coordination",
        NatsKvSettings,
        "With `SHOAL_COORDINATION=nats`: the coordination bucket; where NATS is and how to "
        "log in are the [`SHOAL_NATS_*`](#nats-jetstream) settings'.",
    ),
    Section(
        "Kafka",
        KafkaSettings,
        "With either backend `kafka`. The credentials and TLS apply to every client: "
        "producers, consumers, admin, coordination, transactional committers. "
        + _TLS.format(prefix="SHOAL_KAFKA_")
        + ", only with `SSL` / `SASL_SSL`; `SHOAL_KAFKA_TLS_SERVER_NAME` is refused (aiokafka "
        "checks the broker's advertised host name). A refused login or TLS handshake fails "
        "at once with `Kafka at HOST:PORT (SASL_SSL, user U) refused the login: ...`.",
    ),
    Section(
        "Kafka coordination",
        KafkaKvSettings,
        "With `SHOAL_COORDINATION=kafka`: the log `shoal.{group}.kv` (docs/architecture.md, "
        '"Coordination on Kafka"); the broker and login are the [`SHOAL_KAFKA_*`](#kafka) '
        "settings'.",
    ),
    Section("Parquet files", ParquetSettings, "How the handlers encode the files they land."),
    Section(
        "Landing table",
        TableSettings,
        "The Delta table's upkeep, run by the active leader (it needs "
        "`SHOAL_LEADER_DATA_DIR`, the same zone as the handlers'; unset: no upkeep), and by "
        "each broadcast handler for its own table.",
    ),
    Section(
        "Object storage (S3)",
        S3Settings,
        "For a landing zone at `s3://bucket/prefix` (AWS S3, MinIO, Ceph RGW, R2, GCS's S3 "
        "API: anything that honours `PutObject` with `If-None-Match: *`). Anything unset "
        "falls back to the AWS SDK's chain (`AWS_ENDPOINT_URL`, `AWS_REGION`, "
        "`AWS_ACCESS_KEY_ID`, `AWS_PROFILE`, instance roles, `AWS_CA_BUNDLE`).",
    ),
    Section(
        "Spark analytics",
        SparkSettings,
        "Read by `shoal analytics`; `--master` wins over `SHOAL_SPARK_MASTER`.",
    ),
)

HEADER = f"""# Settings

<!-- Generated by `{COMMAND}` from the settings classes: change a field's
     description (or the section prose in services/cli/settings_doc.py) and run it again.
     tests/unit/test_settings_doc.py fails when this file is stale. -->

Every service process reads `SHOAL_*` environment variables only (no configuration file);
each reads the prefixes of its role and ignores the others, so one set (one ConfigMap) can
serve all. A bad value stops the process at start-up with the variable's name and what is
wrong (`error: SHOAL_X_Y: ...`, exit status 2). Durations are in seconds unless the name
says otherwise.

The adapters' own `SHOAL_ETCD_GROUP`, `SHOAL_REDIS_GROUP`, `SHOAL_KAFKA_GROUP`,
`SHOAL_KAFKA_KV_GROUP` and `SHOAL_NATS_KV_GROUP` (and `SHOAL_KAFKA_PARTITIONS`) exist for
using an adapter alone; the services always pass `SHOAL_GROUP` and `SHOAL_PARTITIONS` to the
adapters, so those win.
"""

FOOTER = """## Read by tools, not by the services

Not settings classes, so listed by hand: `SHOAL_STATE_DIR` (where `shoal up` writes and
`shoal status` reads `up.json`; default `~/.local/state/shoal`), `SHOAL_CACHE` (pip and
Kafka jar cache, default `~/.cache/shoal`), `SHOAL_KAFKA_LIBS` (a directory of Kafka jars
instead of the Maven fetch), `SHOAL_JAVA`, `SHOAL_NATS_SERVER`, `SHOAL_ETCD_BINARY`,
`SHOAL_REDIS_BINARY` (server binaries for `infra/local`), `SHOAL_API_KEY` (`shoal devices`'
key), `SHOAL_TEST_SERVERS=local|docker|external` and `SHOAL_TEST_*_URL` /
`SHOAL_TEST_ETCD_ENDPOINT` / `SHOAL_TEST_KAFKA_BOOTSTRAP` (where the tests find servers),
`SHOAL_CHROMIUM` (the browser tests' Chromium).
"""


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def render() -> str:
    """The whole of docs/settings.md."""
    parts = [HEADER]
    parts.append(
        "\n".join(f"- [{s.title}](#{anchor(s.title)}): `{s.settings.__name__}`" for s in SECTIONS)
        + "\n"
    )
    parts.extend(_section(section) for section in SECTIONS)
    parts.append(FOOTER)
    return "\n".join(parts)


def _section(section: Section) -> str:
    cls = section.settings
    prefix = _prefix(cls)
    lines = [
        f"## {section.title}",
        "",
        f"`{cls.__name__}` (`{cls.__module__}`), prefix `{prefix}`.",
    ]
    if section.intro:
        lines += ["", section.intro]
    lines += ["", "| variable | type | default | meaning |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows(cls)]
    return "\n".join(lines) + "\n"


def _prefix(cls: type[BaseSettings]) -> str:
    if cls is ConnectionSecurity:
        return BACKEND_PREFIX
    return str(cls.model_config.get("env_prefix", ""))


def rows(cls: type[BaseSettings]) -> list[tuple[str, str, str, str]]:
    """(variable, type, default, meaning) for every field ``cls`` reads from the
    environment, in declaration order."""
    prefix = _prefix(cls)
    secrets = _secrets(cls)
    out = []
    for name, field in _fields(cls):
        variable = " or ".join(f"`{v}`" for v in env_names(prefix, name, field))
        kind = type_text(field)
        if name in secrets:
            variable += f" / `{(prefix + name + '_file').upper()}`"
            kind = "secret, or a file holding it"
        out.append((variable, kind, default_text(cls, name, field), _meaning(field)))
    return out


def _secrets(cls: type[BaseSettings]) -> tuple[str, ...]:
    """The secrets with a ``_FILE`` twin (``ConnectionSecurity._SECRETS``)."""
    found: tuple[str, ...] = getattr(cls, "_SECRETS", ())
    return found


def _fields(cls: type[BaseSettings]) -> list[tuple[str, FieldInfo]]:
    """The fields with a row of their own: not the ``_FILE`` twins (their secret's row
    names them), not fields holding composed settings, and not ``ConnectionSecurity``'s in
    its subclasses (its own section shows them once for every backend)."""
    inherited = (
        set(ConnectionSecurity.model_fields)
        if cls is not ConnectionSecurity and issubclass(cls, ConnectionSecurity)
        else set()
    )
    twins = {f"{name}_file" for name in _secrets(cls)}
    return [
        (name, field)
        for name, field in cls.model_fields.items()
        if name not in inherited and name not in twins and not _composed(field)
    ]


def env_names(prefix: str, name: str, field: FieldInfo) -> list[str]:
    """The variables a field is read from: its aliases when it has any (a choice equal to
    the field's name is the constructor's keyword), else prefix + name."""
    alias = field.validation_alias if field.validation_alias is not None else field.alias
    if isinstance(alias, AliasChoices):
        return [c.upper() for c in alias.choices if isinstance(c, str) and c != name]
    if isinstance(alias, str):
        return [alias.upper()]
    return [(prefix + name).upper()]


def _composed(field: FieldInfo) -> bool:
    """A field holding another settings class (NATS KV's ``nats``): its variables are that
    class's, under its own prefix."""
    kind = field.annotation
    return isinstance(kind, type) and issubclass(kind, BaseSettings)


def type_text(field: FieldInfo) -> str:
    """The field's type in words, with its bounds (``number > 0``, ``integer 1..100000``)."""
    bound: dict[str, str] = {}
    pattern = None
    for item in field.metadata:
        for key in ("ge", "gt", "le", "lt"):
            if isinstance(getattr(item, key, None), int | float):
                bound[key] = _number(getattr(item, key))
        if isinstance(item, annotated_types.MinLen) and item.min_length == 1:
            bound["not_empty"] = "not empty"
        if isinstance(getattr(item, "pattern", None), str):
            pattern = item.pattern
    words = []
    if "ge" in bound and "le" in bound:
        words.append(f"{bound['ge']}..{bound['le']}")
    else:
        words += [f"{op} {bound[key]}" for key, op in _OPS if key in bound]
    if "not_empty" in bound:
        words.append("not empty")
    if pattern is not None:
        words.append(f"matching `{pattern}`")
    return " ".join([_type_words(field.annotation), ", ".join(words)]).strip()


_OPS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))


def _type_words(kind: Any) -> str:
    origin, args = get_origin(kind), get_args(kind)
    if origin is Annotated:
        return _type_words(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join(_type_words(a) for a in args if a is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (tuple, list):
        return f"list of {_type_words(args[0])}s"
    if origin is dict:
        return "JSON object"
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return "one of " + ", ".join(f"`{m.value}`" for m in kind)
    words = {
        str: "string",
        int: "integer",
        float: "number",
        bool: "boolean",
        Path: "path",
        SecretStr: "secret",
    }
    if kind in words:
        return words[kind]
    raise TypeError(f"no words for the type {kind!r}: teach services/cli/settings_doc.py")


def default_text(cls: type[BaseSettings], name: str, field: FieldInfo) -> str:
    """The default as an operator would write it, the same on every machine."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("default_text"), str):
        return f"`{extra['default_text']}`"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if not isinstance(value, dict | list | tuple) or value:
            raise ValueError(
                f"{cls.__name__}.{name}: describe its default_factory with "
                "json_schema_extra={'default_text': ...} (a default must not depend on "
                "the machine)"
            )
    else:
        value = field.default
    return _value(name, value)


def _value(name: str, value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, enum.Enum):
        return f"`{value.value}`"
    if isinstance(value, int | float):
        text = f"`{_number(value)}`"
        if name.endswith("bytes") and value >= 1024 and value % 1024 == 0:
            text += f" ({_size(int(value))})"
        return text
    if isinstance(value, dict):
        return f"`{json.dumps(value, sort_keys=True)}`"
    if isinstance(value, tuple | list):
        return ", ".join(f"`{v}`" for v in value) if value else "empty"
    if isinstance(value, Path | str):
        return f"`{value}`" if str(value) else "empty"
    raise TypeError(f"no words for the default {value!r} of {name}")


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _size(value: int) -> str:
    """A multiple of 1024 in the largest binary unit that divides it."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if value % scale == 0:
            return f"{value // scale} {unit}"
    return f"{value // 1024} KiB"


def _meaning(field: FieldInfo) -> str:
    return " ".join((field.description or "").split())


def _cell(text: str) -> str:
    """A table cell: a pipe would end it."""
    return text.replace("|", "\\|")


def undocumented() -> list[str]:
    """``Class.field`` of every field with a row but without a description."""
    return [
        f"{section.settings.__name__}.{name}"
        for section in SECTIONS
        for name, field in _fields(section.settings)
        if not field.description
    ]


def check(path: Path = DOC_PATH) -> str | None:
    """None when ``path`` holds what ``render`` gives; else a unified diff."""
    want = render()
    have = path.read_text(encoding="utf-8") if path.is_file() else ""
    if have == want:
        return None
    diff = difflib.unified_diff(
        have.splitlines(keepends=True),
        want.splitlines(keepends=True),
        fromfile=f"{path} (as it is)",
        tofile=f"{path} (as {COMMAND} writes it)",
    )
    return "".join(diff)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Write docs/settings.md from the settings classes."
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 with a diff when the file is stale"
    )
    parser.add_argument("--output", type=Path, default=DOC_PATH, help="default: %(default)s")
    args = parser.parse_args(argv)
    if args.check:
        diff = check(args.output)
        if diff is None:
            return 0
        sys.stdout.write(diff)
        print(f"\n{args.output} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1
    args.output.write_text(render(), encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
