"""docs/settings.md is generated from the settings classes (``services.cli.settings_doc``):
it must be what the generator writes now, document every settings class the services and
adapters define, and give every field a meaning and a default that is the same on every
machine."""

from __future__ import annotations

import ast
import os
import socket
from pathlib import Path

import pytest

from services.cli import settings_doc

ROOT = Path(settings_doc.__file__).resolve().parents[2]

# Mixins with no prefix of their own: their fields are rows of every class built on them.
MIXINS = {"StoreTiming"}


def test_docs_settings_md_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    status = settings_doc.main(["--check"])
    out = capsys.readouterr().out
    assert status == 0, (
        f"docs/settings.md is stale: run `{settings_doc.COMMAND}` and commit it.\n{out}"
    )


def test_check_prints_a_diff_and_fails_on_a_stale_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "settings.md"
    assert settings_doc.main(["--output", str(doc)]) == 0
    assert settings_doc.main(["--check", "--output", str(doc)]) == 0
    doc.write_text(doc.read_text().replace("`SHOAL_GROUP`", "`SHOAL_GRUOP`"))
    capsys.readouterr()
    assert settings_doc.main(["--check", "--output", str(doc)]) == 1
    out = capsys.readouterr().out
    assert "-| `SHOAL_GRUOP`" in out
    assert "+| `SHOAL_GROUP`" in out


def _settings_classes() -> set[str]:
    """Every class under adapters/, services/ and infra/ built on BaseSettings, directly or
    through another such class (by name: the source is parsed, not imported)."""
    bases: dict[str, set[str]] = {}
    for top in ("adapters", "services", "infra"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    names = {
                        b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases
                    }
                    bases.setdefault(node.name, set()).update(names)
    found = {"BaseSettings"}
    grew = True
    while grew:
        more = {name for name, of in bases.items() if of & found} - found
        found |= more
        grew = bool(more)
    return found - {"BaseSettings"}


def test_every_settings_class_is_documented() -> None:
    documented = {section.settings.__name__ for section in settings_doc.SECTIONS}
    assert _settings_classes() - MIXINS == documented


def test_every_field_has_a_meaning() -> None:
    assert settings_doc.undocumented() == []


def test_defaults_do_not_depend_on_the_machine() -> None:
    text = settings_doc.render()
    assert f"-{os.getpid()}" not in text
    assert f"{socket.gethostname()}-" not in text
    assert "`gw-{host}-{pid}`" in text
    assert " at 0x" not in text  # no object reprs


def test_aliases_and_secret_twins_are_named() -> None:
    text = settings_doc.render()
    assert "| `SHOAL_KAFKA_PARTITIONS` or `SHOAL_PARTITIONS` |" in text
    assert "| `SHOAL_ETCD_PASSWORD` / `SHOAL_ETCD_PASSWORD_FILE` |" in text
    assert "`SHOAL_ETCD_PASSWORD_FILE` |" not in text.replace(" / `SHOAL_ETCD_PASSWORD_FILE`", "")
