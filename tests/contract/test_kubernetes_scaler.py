"""The Scaler contract on ``KubernetesScaler``, against an HTTP server in this test.

No Kubernetes cluster runs here. ``ScaleApiServer`` below is a small HTTP server (a
thread in the test process) that speaks the one API the scaler uses, the apps/v1
Deployment ``scale`` subresource, the way the API server does:

- ``GET  /apis/apps/v1/namespaces/{ns}/deployments/{name}/scale`` -> an autoscaling/v1
  ``Scale`` whose ``metadata.resourceVersion`` is the Deployment's;
- ``PUT`` of a ``Scale``: 409 Conflict (a ``Status`` with reason ``Conflict``) when its
  ``resourceVersion`` is not the current one, else the new replicas and a new version;
- ``PATCH`` with ``application/merge-patch+json``: the same precondition when the patch
  carries ``metadata.resourceVersion``; other patch types are 415;
- 401 without the expected bearer token, 404 for an unknown Deployment.

The real lightkube client talks to it over real sockets, so the requests checked are
the ones lightkube sends: methods, paths, bodies, headers.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import pytest
from lightkube import ApiError, codecs

from adapters.kubernetes import KubernetesScaler, KubernetesSettings, ScaleConflictError
from core.ports import Scaler
from services.leader.settings import AutoscalingSettings
from tests._unavailable import unavailable
from tests.contract._scaler import ScalerContract, ScalerFactory

NAMESPACE = "shoal"
DEPLOYMENT = "shoal-handler"
TOKEN = "test-token-123"
SCALE_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{DEPLOYMENT}/scale"
# PyYAML (a dependency of lightkube) ships no type hints: keep it Any for mypy.
yaml: Any = importlib.import_module("yaml")
CONFLICT_MESSAGE = (
    'Operation cannot be fulfilled on deployments.apps "{name}": the object has been '
    "modified; please apply your changes to the latest version and try again"
)


@dataclass
class Deployment:
    """The part of a Deployment the scale subresource sees, plus one annotation map to
    show that a concurrent change elsewhere in the object survives."""

    replicas: int = 0
    resource_version: int = 1000
    annotations: dict[str, str] = field(default_factory=dict)

    def scale(self, namespace: str, name: str) -> dict[str, Any]:
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": "0b6f3c1e-0000-4000-8000-000000000001",
                "resourceVersion": str(self.resource_version),
                "creationTimestamp": "2026-11-21T00:00:00Z",
            },
            "spec": {"replicas": self.replicas},
            "status": {"replicas": self.replicas, "selector": f"app={name}"},
        }

    def bump(self) -> None:
        self.resource_version += 1


@dataclass(frozen=True)
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    status: int


WriteHook = Callable[[Deployment, str], None]


class ScaleApiServer:
    """The scale subresource of Deployments in memory, over HTTP (or HTTPS)."""

    def __init__(self, token: str | None = TOKEN) -> None:
        self.token = token
        self.deployments: dict[tuple[str, str], Deployment] = {
            (NAMESPACE, DEPLOYMENT): Deployment()
        }
        self.seen: list[Seen] = []
        self.before_write: WriteHook | None = None  # runs before a PUT/PATCH is judged
        self.refuse_put: int | None = None  # answer every PUT with this status
        self.delay = 0.0  # seconds before answering
        self.lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.scheme = "http"

    @property
    def deployment(self) -> Deployment:
        return self.deployments[(NAMESPACE, DEPLOYMENT)]

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def use_tls(self, cert: Path, key: Path) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.scheme = "https"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def writes(self) -> list[Seen]:
        return [s for s in self.seen if s.method in ("PUT", "PATCH")]

    def methods(self) -> list[tuple[str, int]]:
        return [(s.method, s.status) for s in self.seen]

    # -- the protocol ----------------------------------------------------------------

    def answer(
        self, method: str, path: str, headers: dict[str, str], body: Any
    ) -> tuple[int, dict[str, Any]]:
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            return 401, status_doc(401, "Unauthorized", "Unauthorized")
        parts = path.strip("/").split("/")
        shape = ["apis", "apps", "v1", "namespaces", "*", "deployments", "*", "scale"]
        if len(parts) != len(shape) or any(
            p != s for p, s in zip(parts, shape, strict=True) if s != "*"
        ):
            return 404, status_doc(404, "NotFound", f"the server could not find {path}")
        namespace, name = parts[4], parts[6]
        deployment = self.deployments.get((namespace, name))
        if deployment is None:
            return 404, status_doc(404, "NotFound", f'deployments.apps "{name}" not found')
        if method == "GET":
            return 200, deployment.scale(namespace, name)
        if method not in ("PUT", "PATCH"):
            return 405, status_doc(405, "MethodNotAllowed", f"{method} is not supported")
        if method == "PUT" and self.refuse_put is not None:
            return self.refuse_put, status_doc(
                self.refuse_put,
                "Forbidden",
                f'deployments.apps "{name}" is forbidden: User "system:serviceaccount:'
                f'{namespace}:shoal-leader" cannot update resource "deployments/scale"',
            )
        if method == "PATCH" and headers.get("content-type") != "application/merge-patch+json":
            return 415, status_doc(415, "UnsupportedMediaType", "unsupported patch type")
        if self.before_write is not None:
            self.before_write(deployment, method)
        wanted = ((body or {}).get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != str(deployment.resource_version):
            return 409, status_doc(409, "Conflict", CONFLICT_MESSAGE.format(name=name))
        replicas = ((body or {}).get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            return 422, status_doc(422, "Invalid", "spec.replicas must be a non-negative int")
        deployment.replicas = replicas
        deployment.bump()
        return 200, deployment.scale(namespace, name)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                headers = {k.lower(): v for k, v in self.headers.items()}
                url = urlsplit(self.path)
                if server.delay:
                    time.sleep(server.delay)
                with server.lock:
                    status, doc = server.answer(self.command, url.path, headers, body)
                    server.seen.append(
                        Seen(self.command, url.path, parse_qs(url.query), headers, body, status)
                    )
                payload = json.dumps(doc).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the timeout test)

            do_GET = do_PUT = do_PATCH = do_DELETE = _serve

        return Handler


def status_doc(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def write_kubeconfig(path: Path, server: str, token: str = TOKEN) -> Path:
    """A kubeconfig (JSON is YAML) with one context that uses namespace ``shoal``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "tester", "user": {"token": token}}],
        "contexts": [
            {
                "name": "test",
                "context": {"cluster": "test", "user": "tester", "namespace": NAMESPACE},
            },
            {
                "name": "other",
                "context": {"cluster": "test", "user": "tester", "namespace": "nope"},
            },
        ],
        "current-context": "test",
    }
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def api() -> Iterator[ScaleApiServer]:
    server = ScaleApiServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def kube_settings(api: ScaleApiServer, tmp_path: Path) -> KubernetesSettings:
    return KubernetesSettings(
        kubeconfig=write_kubeconfig(tmp_path / "kubeconfig", api.url),
        deployment=DEPLOYMENT,
        timeout=5.0,
        conflict_retries=3,
    )


class TestKubernetesScaler(ScalerContract):
    @pytest.fixture
    def make_scaler(self, kube_settings: KubernetesSettings) -> ScalerFactory:
        def make() -> AbstractAsyncContextManager[Scaler]:
            return KubernetesScaler(kube_settings)

        return make

    async def test_put_carries_the_resource_version_it_read(
        self, api: ScaleApiServer, kube_settings: KubernetesSettings
    ) -> None:
        api.deployment.replicas = 2
        async with KubernetesScaler(kube_settings) as scaler:
            assert scaler.namespace == NAMESPACE  # from the kubeconfig context
            await scaler.scale_to(3)
        assert api.methods() == [("GET", 200), ("PUT", 200)]
        get, put = api.seen
        assert get.path == put.path == SCALE_PATH
        assert get.headers["authorization"] == f"Bearer {TOKEN}"
        assert put.headers["content-type"] == "application/json"
        assert put.query == {"fieldManager": ["shoal-leader"]}
        assert put.body == {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE, "resourceVersion": "1000"},
            "spec": {"replicas": 3},
        }
        assert api.deployment.replicas == 3

    async def test_a_concurrent_change_conflicts_then_the_retry_keeps_both(
        self, api: ScaleApiServer, kube_settings: KubernetesSettings
    ) -> None:
        """Between our GET and our PUT another writer changes the Deployment (a rollout
        restart: an annotation, a new resourceVersion). Our PUT carries the old version:
        409. The scaler re-reads, re-applies on the new version, and the other change is
        still there."""
        api.deployment.replicas = 2

        def rollout_restart(deployment: Deployment, method: str) -> None:
            if method == "PUT" and "restartedAt" not in deployment.annotations:
                deployment.annotations["restartedAt"] = "2026-11-21T10:00:00Z"
                deployment.bump()

        api.before_write = rollout_restart
        async with KubernetesScaler(kube_settings) as scaler:
            await scaler.scale_to(3)
            assert await scaler.replicas() == 3
        assert api.methods() == [
            ("GET", 200),
            ("PUT", 409),
            ("GET", 200),
            ("PUT", 200),
            ("GET", 200),
        ]
        first_put, second_put = api.writes()
        assert first_put.body["metadata"]["resourceVersion"] == "1000"
        assert second_put.body["metadata"]["resourceVersion"] == "1001"
        assert api.deployment.replicas == 3
        assert api.deployment.annotations == {"restartedAt": "2026-11-21T10:00:00Z"}
        assert api.deployment.resource_version == 1002

    async def test_a_concurrent_replicas_change_is_not_overwritten(
        self, api: ScaleApiServer, kube_settings: KubernetesSettings
    ) -> None:
        """Another writer (kubectl scale, an HPA) sets replicas to 5 between our GET and
        PUT: our write conflicts, the re-read shows their 5, and we do not replace it."""
        api.deployment.replicas = 2

        def kubectl_scale(deployment: Deployment, method: str) -> None:
            if deployment.replicas == 2:
                deployment.replicas = 5
                deployment.bump()

        api.before_write = kubectl_scale
        async with KubernetesScaler(kube_settings) as scaler:
            with pytest.raises(ScaleConflictError, match="replicas changed from 2 to 5"):
                await scaler.scale_to(3)
        assert api.methods() == [("GET", 200), ("PUT", 409), ("GET", 200)]
        assert api.deployment.replicas == 5

    async def test_it_gives_up_after_the_retry_budget(
        self, api: ScaleApiServer, kube_settings: KubernetesSettings
    ) -> None:
        def always_changing(deployment: Deployment, method: str) -> None:
            deployment.bump()

        api.before_write = always_changing
        async with KubernetesScaler(kube_settings) as scaler:
            with pytest.raises(ScaleConflictError, match="still conflicting after 3 retries"):
                await scaler.scale_to(4)
        assert [s for s in api.methods() if s[0] == "PUT"] == [("PUT", 409)] * 4
        assert api.deployment.replicas == 0

    async def test_merge_patch_with_the_version_when_put_is_forbidden(
        self, api: ScaleApiServer, kube_settings: KubernetesSettings
    ) -> None:
        """RBAC granting only ``patch``: PUT is 403, the scaler switches to a JSON merge
        patch that carries the same resourceVersion precondition, and stays on it."""
        api.refuse_put = 403
        bumped = False

        def one_concurrent_change(deployment: Deployment, method: str) -> None:
            nonlocal bumped
            if method == "PATCH" and not bumped:
                bumped = True
                deployment.bump()

        api.before_write = one_concurrent_change
        async with KubernetesScaler(kube_settings) as scaler:
            await scaler.scale_to(2)
            await scaler.scale_to(1)
        assert api.methods() == [
            ("GET", 200),
            ("PUT", 403),
            ("PATCH", 409),
            ("GET", 200),
            ("PATCH", 200),
            ("GET", 200),
            ("PATCH", 200),
        ]
        patches = [s for s in api.writes() if s.method == "PATCH"]
        assert all(p.headers["content-type"] == "application/merge-patch+json" for p in patches)
        assert patches[0].body == {"spec": {"replicas": 2}, "metadata": {"resourceVersion": "1000"}}
        assert patches[1].body == {"spec": {"replicas": 2}, "metadata": {"resourceVersion": "1001"}}
        assert patches[2].body == {"spec": {"replicas": 1}, "metadata": {"resourceVersion": "1002"}}
        assert api.deployment.replicas == 1

    async def test_every_call_is_bounded_by_the_timeout(
        self, api: ScaleApiServer, tmp_path: Path
    ) -> None:
        settings = KubernetesSettings(
            kubeconfig=write_kubeconfig(tmp_path / "kubeconfig", api.url), timeout=0.3
        )
        api.delay = 1.5
        async with KubernetesScaler(settings) as scaler:
            started = anyio.current_time()
            with pytest.raises(TimeoutError):
                await scaler.replicas()
            with pytest.raises(TimeoutError):
                await scaler.scale_to(3)
            assert anyio.current_time() - started < 1.5

    async def test_a_missing_deployment_is_an_api_error(
        self, api: ScaleApiServer, tmp_path: Path
    ) -> None:
        settings = KubernetesSettings(
            kubeconfig=write_kubeconfig(tmp_path / "kubeconfig", api.url), deployment="absent"
        )
        async with KubernetesScaler(settings) as scaler:
            with pytest.raises(
                ApiError, match=re.escape('deployments.apps "absent" not found')
            ) as info:
                await scaler.replicas()
        assert info.value.status.code == 404

    async def test_a_wrong_token_is_refused(self, api: ScaleApiServer, tmp_path: Path) -> None:
        settings = KubernetesSettings(
            kubeconfig=write_kubeconfig(tmp_path / "kubeconfig", api.url, token="wrong")
        )
        async with KubernetesScaler(settings) as scaler:
            with pytest.raises(ApiError) as info:
                await scaler.replicas()
        assert info.value.status.code == 401

    async def test_namespace_and_context_settings_choose_the_target(
        self, api: ScaleApiServer, tmp_path: Path
    ) -> None:
        api.deployments[("other-ns", DEPLOYMENT)] = Deployment(replicas=7)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        settings = KubernetesSettings(kubeconfig=kubeconfig, namespace="other-ns")
        async with KubernetesScaler(settings) as scaler:
            assert await scaler.replicas() == 7
        settings = KubernetesSettings(kubeconfig=kubeconfig, context="other")
        async with KubernetesScaler(settings) as scaler:
            assert scaler.namespace == "nope"
            with pytest.raises(ApiError):
                await scaler.replicas()
        assert api.seen[-1].path == "/apis/apps/v1/namespaces/nope/deployments/shoal-handler/scale"


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        unavailable("no openssl to make a certificate (apt-get install openssl)")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.mark.anyio
async def test_in_cluster_service_account_over_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pod: no kubeconfig, the service account's token, namespace and CA, and
    ``KUBERNETES_SERVICE_HOST/PORT`` (lightkube's ``KubeConfig.from_env``)."""
    cert, key = _self_signed(tmp_path)
    api = ScaleApiServer(token="sa-token")
    api.use_tls(cert, key)
    api.start()
    try:
        account = tmp_path / "serviceaccount"
        account.mkdir()
        (account / "token").write_text("sa-token")
        (account / "namespace").write_text(NAMESPACE)
        (account / "ca.crt").write_bytes(cert.read_bytes())
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
        monkeypatch.delenv("KUBECONFIG", raising=False)
        settings = KubernetesSettings(service_account_dir=account, timeout=5.0)
        async with KubernetesScaler(settings) as scaler:
            assert scaler.namespace == NAMESPACE
            await scaler.scale_to(2)
            assert await scaler.replicas() == 2
        assert api.seen[0].headers["authorization"] == "Bearer sa-token"
        assert api.deployment.replicas == 2
    finally:
        api.stop()


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOAL_K8S_NAMESPACE", "prod")
    monkeypatch.setenv("SHOAL_K8S_DEPLOYMENT", "handlers")
    monkeypatch.setenv("SHOAL_K8S_KUBECONFIG", "")
    monkeypatch.setenv("SHOAL_K8S_TIMEOUT", "2.5")
    s = KubernetesSettings()
    assert (s.namespace, s.deployment, s.kubeconfig, s.timeout) == ("prod", "handlers", None, 2.5)


# --- the manifests the scaler runs with (infra/k8s) --------------------------------------

K8S_DIR = Path(__file__).resolve().parents[2] / "infra" / "k8s"
MANIFESTS = ("configmap.yaml", "rbac.yaml", "handler-deployment.yaml", "leader-deployment.yaml")


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> object, from this change's files in infra/k8s."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for name in MANIFESTS:
        for doc in yaml.safe_load_all((K8S_DIR / name).read_text()):
            found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def test_manifests_are_well_formed_objects() -> None:
    """Each object survives a round trip through lightkube's typed models unchanged: a
    misspelt or misplaced field would be dropped by the model and show as a difference."""
    for name in MANIFESTS:
        for doc in yaml.safe_load_all((K8S_DIR / name).read_text()):
            typed: Any = codecs.from_dict(doc)
            assert typed.to_dict() == doc, f"{name}: {doc['kind']}"


def test_rbac_grants_the_leader_exactly_what_the_scaler_uses() -> None:
    objects = manifests()
    config = objects[("ConfigMap", "shoal-config")]["data"]
    handler = objects[("Deployment", "shoal-handler")]
    leader = objects[("Deployment", "shoal-leader")]
    role = objects[("Role", "shoal-leader-scaler")]
    binding = objects[("RoleBinding", "shoal-leader-scaler")]
    assert config["SHOAL_K8S_DEPLOYMENT"] == handler["metadata"]["name"]
    assert role["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments/scale"],
            "resourceNames": [handler["metadata"]["name"]],
            "verbs": ["get", "patch", "update"],  # GET, PATCH (fallback), PUT
        }
    ]
    account = leader["spec"]["template"]["spec"]["serviceAccountName"]
    assert ("ServiceAccount", account) in objects
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": leader["metadata"]["namespace"]}
    ]
    # The leader owns the pool's size: the manifest must not reset it on re-apply.
    assert "replicas" not in handler["spec"]
    assert leader["spec"]["replicas"] == 2
    assert handler["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_the_configmap_holds_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    data: dict[str, str] = manifests()[("ConfigMap", "shoal-config")]["data"]
    for key in list(os.environ):
        if key.startswith("SHOAL_"):
            monkeypatch.delenv(key)
    for key, value in data.items():
        monkeypatch.setenv(key, value)
    scaling = AutoscalingSettings()
    assert scaling.active and scaling.scaler == "kubernetes"
    assert (scaling.interval, scaling.cooldown, scaling.lag_per_handler) == (30, 600, None)
    assert (scaling.min_replicas, scaling.max_replicas) == (2, 10)
    kube = KubernetesSettings()
    assert (kube.deployment, kube.namespace, kube.kubeconfig) == ("shoal-handler", None, None)
