"""Credentials and TLS settings of the four backends: the ``_FILE`` convention, secrets
kept out of reprs and URLs in logs, and half-configured settings refused at start-up with
``error: SHOAL_X_Y: ...`` (``load_settings``)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from adapters._credentials import read_secret_file, redact_url
from adapters._nats_connect import connect_options, describe
from adapters.etcd import EtcdSettings
from adapters.kafka import KafkaSettings
from adapters.nats import NatsSettings
from adapters.redis import RedisSettings
from services.common.backends import check_backend_settings
from services.common.settings import load_settings

SECRET = "pa55-word"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("SHOAL_ETCD_", "SHOAL_REDIS_", "SHOAL_NATS_", "SHOAL_KAFKA_")):
            monkeypatch.delenv(name)


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_text(f"  {SECRET}\n")
    return path


def _refused(
    cls: type,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as exited:
        load_settings(cls)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert SECRET not in err
    return err


def test_a_secret_file_is_read_stripped_and_never_shown(
    secret_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOAL_ETCD_USER", "root")
    monkeypatch.setenv("SHOAL_ETCD_PASSWORD_FILE", str(secret_file))
    settings = load_settings(EtcdSettings)
    assert settings.secret("password") == SECRET
    assert SECRET not in repr(settings) and SECRET not in str(settings)
    monkeypatch.delenv("SHOAL_ETCD_PASSWORD_FILE")
    monkeypatch.setenv("SHOAL_ETCD_PASSWORD", SECRET)
    settings = load_settings(EtcdSettings)
    assert settings.secret("password") == SECRET
    assert SECRET not in repr(settings)


@pytest.mark.parametrize(
    ("cls", "env", "expected"),
    [
        (
            EtcdSettings,
            {"SHOAL_ETCD_USER": "root"},
            "error: SHOAL_ETCD_USER is set without a password: set SHOAL_ETCD_PASSWORD or "
            "SHOAL_ETCD_PASSWORD_FILE",
        ),
        (EtcdSettings, {"SHOAL_ETCD_PASSWORD": SECRET}, "error: SHOAL_ETCD_USER: a password"),
        (
            EtcdSettings,
            {"SHOAL_ETCD_USER": "root", "SHOAL_ETCD_PASSWORD_FILE": "/nonexistent/pw"},
            "error: SHOAL_ETCD_PASSWORD_FILE: cannot read /nonexistent/pw",
        ),
        (
            RedisSettings,
            {"SHOAL_REDIS_USERNAME": "shoal"},
            "error: SHOAL_REDIS_USERNAME is set without a password",
        ),
        (
            RedisSettings,
            {"SHOAL_REDIS_URL": f"redis://u:{SECRET}@h:1/0", "SHOAL_REDIS_PASSWORD": "x"},
            "error: SHOAL_REDIS_URL: holds credentials",
        ),
        (
            NatsSettings,
            {"SHOAL_NATS_USER": "u", "SHOAL_NATS_PASSWORD": "p", "SHOAL_NATS_TOKEN": "t"},
            "error: SHOAL_NATS_USER: one kind of credentials at most, also set: SHOAL_NATS_TOKEN",
        ),
        (
            NatsSettings,
            {"SHOAL_NATS_TLS_CERT_FILE": "__file__"},
            "error: SHOAL_NATS_TLS_CERT_FILE and SHOAL_NATS_TLS_KEY_FILE: a client certificate",
        ),
        (
            NatsSettings,
            {"SHOAL_NATS_TLS_CA_FILE": "/nonexistent/ca.pem"},
            "error: SHOAL_NATS_TLS_CA_FILE: /nonexistent/ca.pem is not a readable file",
        ),
        (
            KafkaSettings,
            {"SHOAL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
            "error: SHOAL_KAFKA_SASL_USERNAME: needed with SHOAL_KAFKA_SECURITY_PROTOCOL=SASL_SSL",
        ),
        (
            KafkaSettings,
            {"SHOAL_KAFKA_SASL_USERNAME": "u", "SHOAL_KAFKA_SASL_PASSWORD": SECRET},
            "error: SHOAL_KAFKA_SASL_USERNAME: SASL credentials need "
            "SHOAL_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT or SASL_SSL",
        ),
        (
            KafkaSettings,
            {"SHOAL_KAFKA_TLS_CA_FILE": "__file__"},
            "error: SHOAL_KAFKA_SECURITY_PROTOCOL: TLS settings need SSL or SASL_SSL",
        ),
        (
            KafkaSettings,
            {"SHOAL_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT ", "SHOAL_KAFKA_SASL_USERNAME": "u"},
            "error: SHOAL_KAFKA_SECURITY_PROTOCOL:",
        ),
    ],
)
def test_half_configured_settings_fail_at_start_up_naming_the_variable(
    cls: type,
    env: dict[str, str],
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {k: (__file__ if v == "__file__" else v) for k, v in env.items()}
    assert expected in _refused(cls, env, monkeypatch, capsys)


def test_both_a_secret_and_its_file_is_refused(
    secret_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {
        "SHOAL_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "SHOAL_KAFKA_SASL_USERNAME": "u",
        "SHOAL_KAFKA_SASL_PASSWORD": SECRET,
        "SHOAL_KAFKA_SASL_PASSWORD_FILE": str(secret_file),
    }
    err = _refused(KafkaSettings, env, monkeypatch, capsys)
    assert "error: SHOAL_KAFKA_SASL_PASSWORD: set both it and SHOAL_KAFKA_SASL_PASSWORD_FILE" in err


def test_an_empty_secret_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        read_secret_file(tmp_path / "empty")


def test_the_services_check_the_chosen_backends_before_connecting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SHOAL_NATS_USER", "u")
    check_backend_settings("etcd", "kafka")  # NATS not chosen: not read
    with pytest.raises(SystemExit):
        check_backend_settings("etcd", "nats")
    assert "error: SHOAL_NATS_USER is set without a password" in capsys.readouterr().err


def test_nats_coordination_checks_the_nats_connection_and_the_bucket_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SHOAL_NATS_KV_STORAGE", "tape")
    check_backend_settings("etcd", "nats")  # NATS KV not chosen: its settings not read
    with pytest.raises(SystemExit):
        check_backend_settings("nats", "kafka")
    assert "error: SHOAL_NATS_KV_STORAGE:" in capsys.readouterr().err
    monkeypatch.delenv("SHOAL_NATS_KV_STORAGE")
    monkeypatch.setenv("SHOAL_NATS_USER", "u")
    with pytest.raises(SystemExit):  # the connection is the transport's: named as such
        check_backend_settings("nats", "kafka")
    assert "error: SHOAL_NATS_USER is set without a password" in capsys.readouterr().err


def test_every_kafka_client_gets_the_sasl_and_tls_options(secret_file: Path) -> None:
    settings = KafkaSettings(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="u",
        sasl_password_file=secret_file,
    )
    options = settings.client_options()
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "u"
    assert options["sasl_plain_password"] == SECRET
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert SECRET not in settings.describe()
    plain = KafkaSettings().client_options()
    assert plain["security_protocol"] == "PLAINTEXT"
    assert "ssl_context" not in plain and "sasl_plain_password" not in plain


def test_nats_options_and_log_lines_name_the_user_not_the_secret(secret_file: Path) -> None:
    settings = NatsSettings(
        url=f"tls://me:{SECRET}@127.0.0.1:4222", user="u", password_file=secret_file
    )
    options = connect_options(settings)
    assert options["user"] == "u" and options["password"]() == SECRET  # read at each login
    assert isinstance(options["tls"], ssl.SSLContext)
    line = describe(settings)
    assert SECRET not in line
    assert "user u" in line and "TLS" in line and "me:***@127.0.0.1:4222" in line


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url(f"redis://user:{SECRET}@host:6379/0") == "redis://user:***@host:6379/0"
    assert redact_url("nats://host:4222") == "nats://host:4222"


def test_a_secret_file_is_read_again_at_each_login(
    secret_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = RedisSettings(password_file=secret_file)
    read = settings.secret_reader("password")
    assert read() == SECRET
    secret_file.write_text("rotated\n")  # Kubernetes swapped the Secret's file
    assert read() == "rotated"
    secret_file.unlink()  # caught between the swap's two steps: the last value serves
    assert read() == "rotated"
    assert "SHOAL_REDIS_PASSWORD: cannot read" in caplog.text
    assert "rotated" not in caplog.text
