"""``KubernetesScaler``: the Scaler port on a Deployment's ``scale`` subresource (lightkube)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import httpx2
from lightkube import AsyncClient, KubeConfig, SingleConfig
from lightkube.models.autoscaling_v1 import ScaleSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DeploymentScale
from lightkube.types import PatchType

from adapters._lifecycle import Lifecycle
from adapters.kubernetes._errors import ScaleConflictError
from adapters.kubernetes._settings import KubernetesSettings

__all__ = ["KubernetesScaler"]

log = logging.getLogger("shoal.adapters.kubernetes")

T = TypeVar("T")

_CONFLICT = 409
# PUT refused but PATCH may be allowed: RBAC granting only `patch` (403), a proxy or
# server not accepting PUT on the subresource (405), or not this body type (415).
_PUT_REFUSED = frozenset({403, 405, 415})
_BACKOFF = 0.05  # first wait after a 409, doubled per retry, capped at _BACKOFF_MAX
_BACKOFF_MAX = 1.0


class KubernetesScaler(Lifecycle):
    """Reads and sets ``spec.replicas`` of the handler Deployment through
    ``/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale``.

    ``async with KubernetesScaler(settings) as scaler:`` loads the configuration
    (in-cluster service account, or a kubeconfig file) and opens lightkube's async
    client; leaving closes it. Nothing connects in the constructor.

    ``replicas()`` is the Deployment's desired count (``spec.replicas`` of the scale), not
    the pods ready: the Deployment controller turns one into the other.

    ``scale_to(n)`` is optimistic concurrency: read the scale (with its
    ``resourceVersion``), then replace it carrying that ``resourceVersion``, so the API
    server refuses the write with 409 Conflict if anything changed the Deployment in
    between. On 409 it re-reads and re-applies, up to ``conflict_retries`` times, with
    a short backoff. If the re-read shows that another writer changed ``spec.replicas``
    itself (kubectl scale, an HPA, another leader), it does not overwrite that change:
    it raises ``ScaleConflictError`` and the caller decides again on fresh numbers. If
    the API server refuses PUT (403 when RBAC grants only ``patch``, 405, 415), it falls
    back to a JSON merge-patch that carries the same ``resourceVersion`` precondition
    (and keeps using it). Every call is bounded by ``timeout`` (``TimeoutError``).
    Other API errors propagate as lightkube's ``ApiError`` (an ``httpx2.HTTPStatusError``).
    """

    def __init__(
        self,
        settings: KubernetesSettings | None = None,
        *,
        config: KubeConfig | SingleConfig | None = None,
    ) -> None:
        self.settings = settings or KubernetesSettings()
        self._config = config
        self._client: AsyncClient | None = None
        self._use_patch = False
        self.namespace: str | None = self.settings.namespace

    # -- lifecycle -------------------------------------------------------------------

    async def _connect(self) -> None:
        s = self.settings
        config = self._config or await anyio.to_thread.run_sync(self._load_config)
        self._client = AsyncClient(
            config=config,
            namespace=s.namespace,
            timeout=httpx2.Timeout(s.timeout),
            field_manager=s.field_manager,
        )
        self.namespace = self._client.namespace
        log.info(
            "scaling deployment %s/%s via %s",
            self.namespace,
            s.deployment,
            self._client.config.cluster.server,
        )

    async def _disconnect(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with anyio.move_on_after(self.settings.timeout):
                await client.close()

    def _load_config(self) -> KubeConfig | SingleConfig:
        s = self.settings
        if s.kubeconfig is not None:
            config = KubeConfig.from_file(s.kubeconfig)
        else:
            config = KubeConfig.from_env(service_account=s.service_account_dir)
        if s.context is None:
            return config
        single = config.get(context_name=s.context)  # raises ConfigError if it is missing
        assert single is not None
        return single

    # -- the port --------------------------------------------------------------------

    async def replicas(self) -> int:
        scale = await self._read()
        return _replicas_of(scale)

    async def scale_to(self, replicas: int) -> None:
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        s = self.settings
        current = await self._read()
        first = _replicas_of(current)
        for attempt in range(s.conflict_retries + 1):
            now = _replicas_of(current)
            if now == replicas:
                return
            if now != first:
                raise ScaleConflictError(
                    f"deployment {self.namespace}/{s.deployment}: replicas changed from "
                    f"{first} to {now} by another writer while setting {replicas}; not "
                    "overwriting it"
                )
            version = current.metadata.resourceVersion if current.metadata else None
            try:
                await self._write(replicas, version)
            except httpx2.HTTPStatusError as exc:
                code = exc.response.status_code
                if code in _PUT_REFUSED and not self._use_patch:
                    log.warning(
                        "PUT on the scale subresource refused (%d): using merge-patch", code
                    )
                    self._use_patch = True
                    continue
                if code != _CONFLICT:
                    raise
                log.info(
                    "scale of %s/%s conflicted (resourceVersion %s); re-reading",
                    self.namespace,
                    s.deployment,
                    version,
                )
                await anyio.sleep(min(_BACKOFF * 2**attempt, _BACKOFF_MAX))
                current = await self._read()
                continue
            log.info(
                "scaled deployment %s/%s from %d to %d", self.namespace, s.deployment, now, replicas
            )
            return
        raise ScaleConflictError(
            f"deployment {self.namespace}/{s.deployment}: still conflicting after "
            f"{s.conflict_retries} retries; replicas not set to {replicas}"
        )

    # -- helpers ---------------------------------------------------------------------

    def _require(self) -> AsyncClient:
        if self._client is None:
            raise RuntimeError("KubernetesScaler is not open: use it as `async with ...`")
        return self._client

    async def _read(self) -> DeploymentScale:
        client = self._require()
        s = self.settings
        return await self._bounded(
            lambda: client.get(DeploymentScale, s.deployment, namespace=self.namespace)
        )

    async def _write(self, replicas: int, version: str | None) -> None:
        client = self._require()
        s = self.settings
        if self._use_patch:
            patch: dict[str, object] = {"spec": {"replicas": replicas}}
            if version is not None:
                patch["metadata"] = {"resourceVersion": version}
            await self._bounded(
                lambda: client.patch(
                    DeploymentScale,
                    s.deployment,
                    patch,
                    namespace=self.namespace,
                    patch_type=PatchType.MERGE,
                )
            )
            return
        body = DeploymentScale(
            metadata=ObjectMeta(
                name=s.deployment, namespace=self.namespace, resourceVersion=version
            ),
            spec=ScaleSpec(replicas=replicas),
        )
        await self._bounded(lambda: client.replace(body, s.deployment, namespace=self.namespace))

    async def _bounded(self, call: Callable[[], Awaitable[T]]) -> T:
        """One API call within ``timeout``; httpx2's own timeouts become ``TimeoutError``."""
        timeout = self.settings.timeout
        try:
            with anyio.fail_after(timeout):
                return await call()
        except httpx2.TimeoutException as exc:
            raise TimeoutError(f"Kubernetes API call timed out after {timeout:g} s") from exc


def _replicas_of(scale: DeploymentScale) -> int:
    return (scale.spec.replicas if scale.spec else None) or 0
