"""Credentials and TLS on real servers with authentication on (issue 13, point 2).

Each backend: the adapter works with the right secret (read from a file, the Kubernetes
way) and is refused, with an error that names the server and the user but never the
secret, with a wrong one or none. NATS, etcd and Redis run a private server of their own
(cheap); Kafka uses the SASL_PLAINTEXT listener of the session's local broker.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import anyio
import nkeys
import pytest
from etcd3aio import Etcd3Client
from pydantic import SecretStr

from adapters.coordination import StoreMembership
from adapters.etcd import EtcdCoordinationStore, EtcdSettings
from adapters.etcd._client import EtcdClient
from adapters.kafka import (
    KafkaCoordinationStore,
    KafkaIdempotencyStore,
    KafkaKvSettings,
    KafkaSettings,
    KafkaTransport,
)
from adapters.nats import NatsDeadLetterQueue, NatsIdempotencyStore, NatsSettings, NatsTransport
from adapters.redis import RedisCoordinationStore, RedisSettings
from core.errors import StoreUnavailableError
from infra.local._handles import RunningEtcd, RunningNats, RunningRedis
from infra.local._process import ServerStartError, free_port
from infra.local._testservers import ServerInfo
from infra.local._tls import TestPki as Pki
from infra.local._tls import make_test_pki, openssl_available
from infra.local.servers import start_etcd, start_nats, start_redis
from tests._unavailable import unavailable
from tests.contract._coordination import next_within, until, watching
from tests.contract._idempotency import answer
from tests.contract._transport import envelope, fetch_n

pytestmark = pytest.mark.anyio

PASSWORD = "s3cret-" + uuid.uuid4().hex[:8]  # a fresh one per run: never in any output
WRONG = "wrong-" + uuid.uuid4().hex[:8]
TTL = 10.0


def _secret_file(directory: Path, name: str, value: str) -> Path:
    path = directory / name
    path.write_text(f"{value}\n")  # a trailing newline, as `kubectl create secret` leaves
    path.chmod(0o600)
    return path


def _start_private(start: object, **kwargs: object) -> object:
    try:
        return start(**kwargs)  # type: ignore[operator]
    except (ServerStartError, FileNotFoundError) as exc:
        unavailable(f"cannot start a private server: {exc}")


def _no_secret_in(text: str) -> None:
    assert PASSWORD not in text
    assert WRONG not in text


# --- TLS material (openssl CLI) -------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (EC P-256)."""
    if not openssl_available():
        unavailable("no openssl to make test certificates (apt-get install openssl)")
    return make_test_pki(tmp_path_factory.mktemp("pki"))


# --- NATS -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secure_nats(pki: Pki) -> Iterator[RunningNats]:
    """A nats-server that wants user `shoal` and TLS, with a client certificate."""
    server = _start_private(
        start_nats,
        name="shoal-nats-auth",
        extra_args=(
            "--user", "shoal", "--pass", PASSWORD,
            "--tlsverify", "--tlscert", str(pki.server_cert), "--tlskey", str(pki.server_key),
            "--tlscacert", str(pki.ca),
        ),
    )  # fmt: skip
    assert isinstance(server, RunningNats)
    try:
        yield server
    finally:
        server.stop()


def _nats_settings(server: RunningNats, pki: Pki, **update: object) -> NatsSettings:
    tag = uuid.uuid4().hex[:10]
    values: dict[str, object] = {
        "url": server.url,
        "stream": f"T{tag}",
        "subject_prefix": f"t{tag}.data",
        "dead_letter_stream": f"T{tag}_DLQ",
        "dead_letter_prefix": f"t{tag}.dlq",
        "connect_timeout": 5.0,
        "user": "shoal",
        "tls_ca_file": pki.ca,
        "tls_cert_file": pki.client_cert,
        "tls_key_file": pki.client_key,
        **update,
    }
    return NatsSettings(**values)  # type: ignore[arg-type]


@pytest.mark.nats
async def test_nats_publishes_and_consumes_with_the_password_from_a_file_over_tls(
    secure_nats: RunningNats, pki: Pki, tmp_path: Path
) -> None:
    settings = _nats_settings(
        secure_nats, pki, password_file=_secret_file(tmp_path, "nats-password", PASSWORD)
    )
    _no_secret_in(repr(settings))
    async with NatsTransport(settings) as transport:
        sent = [envelope(0, "projA", i) for i in range(1, 4)]
        await transport.publish(sent)
        sub = await transport.open(0, "h1")
        got = await fetch_n(sub, 3)
        assert [d.envelope.message_id for d in got] == [e.message_id for e in sent]
        await sub.ack(got)
        await sub.close()
    async with NatsDeadLetterQueue(settings) as queue:  # the other NATS connection
        assert list(await queue.letters()) == []
    async with NatsIdempotencyStore(settings, window=60) as store:  # the gateway's third
        remembered = answer(key=uuid.uuid4().hex)
        await store.remember(remembered)
        assert await store.recall(remembered.project_id, remembered.key_digest) == remembered


@pytest.mark.nats
@pytest.mark.parametrize("password", [WRONG, None], ids=["wrong", "none"])
async def test_nats_refuses_a_wrong_or_missing_password_at_once(
    secure_nats: RunningNats, pki: Pki, password: str | None
) -> None:
    update: dict[str, object] = {"password": password, "connect_timeout": 30.0}
    if password is None:
        update["user"] = None
    settings = _nats_settings(secure_nats, pki, **update)
    with anyio.fail_after(10):  # not after connect_timeout: a refusal is final
        with pytest.raises(PermissionError, match="Authorization Violation") as caught:
            async with NatsTransport(settings):
                pass
    assert "refused the login" in str(caught.value)
    _no_secret_in(str(caught.value))


@pytest.mark.nats
async def test_nats_refuses_a_server_certificate_the_ca_did_not_sign(
    secure_nats: RunningNats, pki: Pki, tmp_path: Path
) -> None:
    # the system's CAs instead of ours: the server's certificate cannot be verified
    settings = _nats_settings(
        secure_nats, pki, password=PASSWORD, tls_ca_file=None, connect_timeout=3.0
    )
    assert settings.tls_wanted
    with anyio.fail_after(10), pytest.raises(PermissionError, match="certificate verify failed"):
        async with NatsTransport(settings.model_copy(update={"connect_timeout": 30.0})):
            pass


@pytest.mark.nats
async def test_nats_token_from_a_file_is_accepted_and_a_wrong_one_refused(
    tmp_path: Path,
) -> None:
    start = functools.partial(
        _start_private, start_nats, name="shoal-nats-token", extra_args=("--auth", PASSWORD)
    )
    server = await anyio.to_thread.run_sync(start)
    assert isinstance(server, RunningNats)
    try:
        tag = uuid.uuid4().hex[:10]
        settings = NatsSettings(
            url=server.url,
            stream=f"T{tag}",
            subject_prefix=f"t{tag}.data",
            dead_letter_stream=f"T{tag}_DLQ",
            dead_letter_prefix=f"t{tag}.dlq",
            token_file=_secret_file(tmp_path, "nats-token", PASSWORD),
        )
        async with NatsTransport(settings) as transport:
            sent = [envelope(2, "projA", 1)]
            await transport.publish(sent)
            sub = await transport.open(2, "h1")
            got = await fetch_n(sub, 1)
            assert got[0].envelope == sent[0]
            await sub.ack(got)
            await sub.close()
        wrong = settings.model_copy(update={"token_file": None, "token": SecretStr(WRONG)})
        with anyio.fail_after(10), pytest.raises(PermissionError) as caught:
            async with NatsTransport(wrong.model_copy(update={"connect_timeout": 30.0})):
                pass
        assert "a token" in str(caught.value)
        _no_secret_in(str(caught.value))
    finally:
        await anyio.to_thread.run_sync(server.stop)


def _nkey_seed_file(directory: Path, name: str) -> tuple[Path, str]:
    """A fresh user nkey: its seed in a file (as `nk -gen user` writes it) and its public key."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    return _secret_file(directory, name, seed.decode()), public


@pytest.mark.nats
async def test_nats_nkey_seed_is_accepted_and_an_unknown_nkey_refused(tmp_path: Path) -> None:
    admitted_seed, admitted = _nkey_seed_file(tmp_path, "admitted.nk")
    stranger_seed, _ = _nkey_seed_file(tmp_path, "stranger.nk")
    start = functools.partial(
        _start_private, start_nats, name="shoal-nats-nkey", nkey_users=(admitted,)
    )
    server = await anyio.to_thread.run_sync(start)
    assert isinstance(server, RunningNats)
    try:
        tag = uuid.uuid4().hex[:10]
        settings = NatsSettings(
            url=server.url,
            stream=f"T{tag}",
            subject_prefix=f"t{tag}.data",
            dead_letter_stream=f"T{tag}_DLQ",
            dead_letter_prefix=f"t{tag}.dlq",
            nkey_seed_file=admitted_seed,
        )
        _no_secret_in(repr(settings))
        async with NatsTransport(settings) as transport:
            sent = [envelope(1, "projA", i) for i in range(1, 3)]
            await transport.publish(sent)
            sub = await transport.open(1, "h1")
            got = await fetch_n(sub, 2)
            assert [d.envelope.message_id for d in got] == [e.message_id for e in sent]
            await sub.ack(got)
            await sub.close()
        stranger = settings.model_copy(
            update={"nkey_seed_file": stranger_seed, "connect_timeout": 30.0}
        )
        with anyio.fail_after(10), pytest.raises(PermissionError) as caught:
            async with NatsTransport(stranger):
                pass
        assert "an nkey" in str(caught.value)
        assert stranger_seed.read_text().strip() not in str(caught.value)
    finally:
        await anyio.to_thread.run_sync(server.stop)


# --- etcd -----------------------------------------------------------------------------------


async def _enable_etcd_auth(endpoint: str) -> None:
    """etcdctl's recipe: a root role, a root user that has it, then auth on."""
    admin = Etcd3Client([endpoint])
    await admin.connect()
    try:
        assert admin.auth is not None
        await admin.auth.role_add("root", timeout=5)
        await admin.auth.user_add("root", PASSWORD, timeout=5)
        await admin.auth.user_grant_role("root", "root", timeout=5)
        await admin.auth.auth_enable(timeout=5)
    finally:
        await admin.close()


@dataclass(frozen=True)
class SecureEtcd:
    server: RunningEtcd
    tls_endpoint: str  # host:port of its https client listener (mutual TLS)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """One event loop for the module's tests from the first etcd one on (the module-scoped
    async fixture below holds it): gRPC's aio poller, under etcd's client, stays bound to
    every loop that made a call, and a completion arriving late for a call of an earlier,
    closed loop failed whichever test was running then ('Event loop is closed')."""
    return "asyncio"


@pytest.fixture(scope="module")
async def etcd_with_auth(pki: Pki) -> AsyncIterator[SecureEtcd]:
    """An etcd with auth on (user `root`), a 2 s token TTL (to see tokens expire), and
    besides its plain client URL (the readiness check's) an https one wanting a client
    certificate."""
    tls_port = free_port()
    server = _start_private(
        start_etcd,
        name="shoal-etcd-auth",
        extra_args=(
            "--auth-token-ttl=2",
            f"--cert-file={pki.server_cert}",
            f"--key-file={pki.server_key}",
            f"--trusted-ca-file={pki.ca}",
            "--client-cert-auth",
        ),
        extra_client_urls=(f"https://127.0.0.1:{tls_port}",),
    )
    assert isinstance(server, RunningEtcd)
    try:
        await _enable_etcd_auth(server.endpoint)
        yield SecureEtcd(server, f"127.0.0.1:{tls_port}")
    finally:
        server.stop()


def etcd_membership(settings: EtcdSettings) -> StoreMembership:
    return StoreMembership(EtcdCoordinationStore(settings))


def redis_membership(settings: RedisSettings) -> StoreMembership:
    return StoreMembership(RedisCoordinationStore(settings))


@pytest.mark.etcd
async def test_etcd_membership_works_with_the_user_and_outlives_its_token(
    etcd_with_auth: SecureEtcd, tmp_path: Path
) -> None:
    settings = EtcdSettings(
        endpoints=(etcd_with_auth.server.endpoint,),
        group=f"t-{uuid.uuid4().hex[:12]}",
        user="root",
        password_file=_secret_file(tmp_path, "etcd-password", PASSWORD),
    )
    _no_secret_in(repr(settings))
    async with etcd_membership(settings) as membership:
        await membership.join("a", TTL)
        assert await membership.members() == {"a"}
        # the token expires after 2 s without use (etcd's --auth-token-ttl): the next call
        # is refused once, logs in again and goes through
        await anyio.sleep(3)
        assert await membership.members() == {"a"}
        async with (
            watching(membership.watch()) as updates,
            etcd_membership(settings) as other,
        ):
            assert await next_within(updates) == {"a"}
            await other.join("b", TTL)  # seen through the watch stream, opened with a token
            await until(updates, lambda members: members == {"a", "b"}, 10)


@pytest.mark.etcd
async def test_etcd_watch_stream_logs_in_again_when_its_token_expired(
    etcd_with_auth: SecureEtcd,
) -> None:
    settings = EtcdSettings(
        endpoints=(etcd_with_auth.server.endpoint,), user="root", password=SecretStr(PASSWORD)
    )
    key = f"/t-{uuid.uuid4().hex[:12]}"
    client = EtcdClient(settings)
    await client.connect()
    kv = client.connected.kv
    assert kv is not None
    try:
        read = await client.call("get", lambda t: kv.get(key, timeout=t))  # logs in
        revision = int(read.header.revision)
        await anyio.sleep(3)  # etcd forgets the unused token after 2 s (--auth-token-ttl)
        stream = client.watch_stream(key, None, revision + 1)
        async with aclosing(stream):
            created = await anext(stream)
            assert created.created and not created.canceled  # opened again with a new token
            await client.call("put", lambda t: kv.put(key, b"v", timeout=t))
            with anyio.fail_after(10):
                event = await anext(stream)
            assert [bytes(e.kv.key).decode() for e in event.events] == [key]
    finally:
        await client.aclose()


M = TypeVar("M")


async def _refusal(
    adapter: AbstractAsyncContextManager[M], call: Callable[[M], Awaitable[object]]
) -> StoreUnavailableError:
    """The refusal, at enter (the adapter asks the server's version) or at ``call``."""
    try:
        async with adapter as entered:
            with pytest.raises(StoreUnavailableError) as inside:
                await call(entered)
            return inside.value
    except StoreUnavailableError as at_enter:
        return at_enter


@pytest.mark.etcd
@pytest.mark.parametrize("user", ["root", None], ids=["wrong-password", "no-user"])
async def test_etcd_refuses_a_wrong_password_or_no_user(
    etcd_with_auth: SecureEtcd, user: str | None
) -> None:
    settings = EtcdSettings(
        endpoints=(etcd_with_auth.server.endpoint,),
        group=f"t-{uuid.uuid4().hex[:12]}",
        user=user,
        password=SecretStr(WRONG) if user else None,
        call_timeout=3.0,
    )
    message = str(await _refusal(etcd_membership(settings), lambda m: m.join("a", TTL)))
    _no_secret_in(message)
    if user:
        assert "refused user 'root'" in message
        assert "authentication failed" in message
    else:
        assert "user name is empty" in message or "permission denied" in message


@pytest.mark.etcd
async def test_etcd_membership_works_over_mutual_tls(etcd_with_auth: SecureEtcd, pki: Pki) -> None:
    settings = EtcdSettings(
        endpoints=(etcd_with_auth.tls_endpoint,),
        group=f"t-{uuid.uuid4().hex[:12]}",
        user="root",
        password=SecretStr(PASSWORD),
        tls_ca_file=pki.ca,
        tls_cert_file=pki.client_cert,
        tls_key_file=pki.client_key,
    )
    async with etcd_membership(settings) as membership:
        await membership.join("a", TTL)
        assert await membership.members() == {"a"}
    plaintext = settings.model_copy(
        update={
            "tls_ca_file": None,
            "tls_cert_file": None,
            "tls_key_file": None,
            "call_timeout": 2.0,
        }
    )
    await _refusal(etcd_membership(plaintext), lambda m: m.members())  # plaintext to TLS


# --- Redis ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_with_acl() -> Iterator[RunningRedis]:
    """A redis-server whose default user needs a password and with an ACL user `shoal`."""
    server = _start_private(
        start_redis,
        name="shoal-redis-auth",
        extra_args=(
            "--requirepass", PASSWORD,
            "--user", "shoal", "on", f">{PASSWORD}", "~*", "&*", "+@all",
        ),
    )  # fmt: skip
    assert isinstance(server, RunningRedis)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.redis
@pytest.mark.parametrize("username", ["shoal", None], ids=["acl-user", "requirepass"])
async def test_redis_membership_works_with_the_password_from_a_file(
    redis_with_acl: RunningRedis, tmp_path: Path, username: str | None
) -> None:
    settings = RedisSettings(
        url=redis_with_acl.url,
        group=f"t-{uuid.uuid4().hex[:12]}",
        username=username,
        password_file=_secret_file(tmp_path, "redis-password", PASSWORD),
    )
    _no_secret_in(repr(settings))
    async with redis_membership(settings) as membership:
        await membership.join("a", TTL)
        assert await membership.members() == {"a"}


@pytest.mark.redis
@pytest.mark.parametrize("password", [WRONG, None], ids=["wrong", "none"])
async def test_redis_refuses_a_wrong_or_missing_password(
    redis_with_acl: RunningRedis, password: str | None
) -> None:
    settings = RedisSettings(
        url=redis_with_acl.url,
        group=f"t-{uuid.uuid4().hex[:12]}",
        username="shoal" if password else None,
        password=None if password is None else SecretStr(password),
        call_timeout=3.0,
    )
    message = str(await _refusal(redis_membership(settings), lambda m: m.join("a", TTL)))
    _no_secret_in(message)
    # redis-py logs in with HELLO: without a password Redis answers that HELLO needs one
    assert ("invalid username-password" in message) if password else ("authenticat" in message)


@pytest.mark.redis
async def test_redis_membership_works_over_mutual_tls(pki: Pki) -> None:
    tls_port = free_port()
    start = functools.partial(
        _start_private,
        start_redis,
        name="shoal-redis-tls",
        extra_args=(
            "--requirepass", PASSWORD,
            "--tls-port", str(tls_port),
            "--tls-cert-file", str(pki.server_cert),
            "--tls-key-file", str(pki.server_key),
            "--tls-ca-cert-file", str(pki.ca),
            "--tls-auth-clients", "yes",
        ),
    )  # fmt: skip
    server = await anyio.to_thread.run_sync(start)
    assert isinstance(server, RunningRedis)
    try:
        settings = RedisSettings(
            url=f"redis://127.0.0.1:{tls_port}/0",  # TLS from the settings: rediss
            group=f"t-{uuid.uuid4().hex[:12]}",
            password=SecretStr(PASSWORD),
            tls_ca_file=pki.ca,
            tls_cert_file=pki.client_cert,
            tls_key_file=pki.client_key,
            call_timeout=3.0,
        )
        async with redis_membership(settings) as membership:
            await membership.join("a", TTL)
            assert await membership.members() == {"a"}
        no_cert = settings.model_copy(update={"tls_cert_file": None, "tls_key_file": None})
        await _refusal(redis_membership(no_cert), lambda m: m.members())  # no client cert
    finally:
        await anyio.to_thread.run_sync(server.stop)


# --- Kafka ----------------------------------------------------------------------------------


@pytest.fixture
def kafka_sasl(kafka_server: ServerInfo) -> tuple[str, str, str]:
    if kafka_server.sasl_endpoint is None or kafka_server.sasl_credentials is None:
        unavailable(
            f"the {kafka_server.mode} Kafka offers no SASL listener: only the local broker of"
            " infra/local has one (SHOAL_TEST_SERVERS=local)"
        )
    return kafka_server.sasl_endpoint, *kafka_server.sasl_credentials


def _kafka_settings(endpoint: str, user: str, **update: object) -> KafkaSettings:
    tag = uuid.uuid4().hex[:10]
    values: dict[str, object] = {
        "bootstrap_servers": (endpoint,),
        "group": f"t{tag}",
        "topic": f"t{tag}.data",
        "dead_letter_topic": f"t{tag}.dlq",
        "registration_topic": f"t{tag}.reg",
        "partitions": 2,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_username": user,
        "connect_timeout": 10.0,
        "request_timeout": 5.0,
        **update,
    }
    return KafkaSettings(**values)  # type: ignore[arg-type]


MECHANISMS = pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])


@pytest.mark.kafka
@MECHANISMS
async def test_kafka_transport_and_membership_work_through_sasl(
    kafka_sasl: tuple[str, str, str], tmp_path: Path, mechanism: str
) -> None:
    endpoint, user, password = kafka_sasl
    settings = _kafka_settings(
        endpoint,
        user,
        sasl_mechanism=mechanism,
        sasl_password_file=_secret_file(tmp_path, "kafka-password", password),
    )
    assert password not in repr(settings)
    async with KafkaTransport(settings) as transport:  # admin, producer, probe
        sent = [envelope(1, "projA", i) for i in range(1, 4)]
        await transport.publish(sent)
        sub = await transport.open(1, "h1")  # consumer and transactional committer
        got = await fetch_n(sub, 3)
        assert [d.envelope.message_id for d in got] == [e.message_id for e in sent]
        await sub.ack(got)
        await sub.close()
    coordination = KafkaCoordinationStore(KafkaKvSettings(kafka=settings))
    async with StoreMembership(coordination) as membership:  # the coordination clients
        await membership.join("a", TTL)
        assert await membership.members() == {"a"}
    async with KafkaIdempotencyStore(settings, window=60) as store:  # the gateway's other
        remembered = answer(key=uuid.uuid4().hex)
        await store.remember(remembered)
        assert await store.recall(remembered.project_id, remembered.key_digest) == remembered


@pytest.mark.kafka
@MECHANISMS
async def test_kafka_refuses_a_wrong_password_with_a_clear_error(
    kafka_sasl: tuple[str, str, str], mechanism: str
) -> None:
    endpoint, user, password = kafka_sasl
    settings = _kafka_settings(
        endpoint, user, sasl_mechanism=mechanism, sasl_password=WRONG, connect_timeout=30.0
    )
    with anyio.fail_after(10):  # at once, not after connect_timeout
        with pytest.raises(PermissionError) as refused:
            async with KafkaTransport(settings):
                pass
        with pytest.raises(StoreUnavailableError) as no_store:
            async with StoreMembership(KafkaCoordinationStore(KafkaKvSettings(kafka=settings))):
                pass
    for message in (str(refused.value), str(no_store.value)):
        assert f"Kafka at {endpoint} (SASL_PLAINTEXT, user {user}) refused the login" in message
        assert "SaslAuthenticationFailed" in message
        assert password not in message
        assert WRONG not in message


@pytest.mark.kafka
async def test_kafka_transport_works_through_sasl_ssl_and_checks_the_certificate(
    kafka_server: ServerInfo, kafka_sasl: tuple[str, str, str]
) -> None:
    if kafka_server.sasl_ssl_endpoint is None or kafka_server.tls_ca_file is None:
        unavailable(
            "the local Kafka has no SASL_SSL listener: no openssl made its certificate"
            " (apt-get install openssl)"
        )
    endpoint, (user, password) = kafka_server.sasl_ssl_endpoint, kafka_sasl[1:]
    settings = _kafka_settings(
        endpoint,
        user,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_password=SecretStr(password),
        tls_ca_file=kafka_server.tls_ca_file,
    )
    async with KafkaTransport(settings) as transport:
        sent = [envelope(0, "projA", 1)]
        await transport.publish(sent)
        sub = await transport.open(0, "h1")
        got = await fetch_n(sub, 1)
        assert got[0].envelope == sent[0]
        await sub.ack(got)
        await sub.close()
    system_cas = settings.model_copy(update={"tls_ca_file": None})  # ours is not among them
    with anyio.fail_after(10), pytest.raises(PermissionError, match="certificate verify failed"):
        async with KafkaTransport(system_cas):
            pass
