"""Is "stored" as strong as configured? Checked once, when a transport (or a NATS KV
coordination adapter: the server fsync only) connects.

- Every server named by ``monitor_url`` must fsync each write (``jetstream {
  sync_interval: always }``; its ``/varz`` says ``sync_always``): otherwise an acknowledged
  message lives only in the page cache until the next sync (two minutes by default) and a
  machine that dies loses it. A client cannot switch this on, only refuse to run without
  it (``require_sync_always``). Without a monitor URL the check cannot be made; that is
  logged.
- The stream must have the storage and the replicas asked for, and every replica should be
  current (a lagging one is logged: the stream still takes writes on a quorum); when a
  size cap and a discard policy were asked for, the stream must have them (a data stream
  that drops the oldest messages when full loses unlanded ones).
- A feature switched on in the configuration (``allow_atomic``, ``allow_msg_ttl``) must
  come back switched on: a server too old for it drops it without an error, which the
  version check at connect time (``core.server_floors``) should already have refused; a
  cluster with one old server in it is caught here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from nats.js import api as js_api

from core.errors import DurabilityError, IncompatibleServerError
from core.server_floors import NATS_ATOMIC_BATCH, NATS_MESSAGE_TTL, Feature

__all__ = ["check_server_fsync", "check_stream"]

log = logging.getLogger("shoal.adapters.nats")


async def check_server_fsync(
    monitor_urls: Sequence[str], *, request_timeout: float, require: bool
) -> None:
    """Ask each server's ``/varz`` whether it fsyncs every write; ``DurabilityError`` when
    one does not (and ``require``) or cannot be asked."""
    if not monitor_urls:
        log.info(
            "nats-server durability not verified: SHOAL_NATS_MONITOR_URL is not set "
            "(the check that every server fsyncs each write needs its monitoring port)"
        )
        return
    # Here, not at the top: httpx (and the CLI libraries it pulls in where installed:
    # click, rich, pygments) is 5 MB a process that names no monitor URL does without.
    import httpx  # noqa: PLC0415 (only with a monitor URL)

    async with httpx.AsyncClient(timeout=request_timeout, trust_env=False) as http:
        for url in monitor_urls:
            varz = url.rstrip("/") + "/varz"
            try:
                response = await http.get(varz)
                response.raise_for_status()
                config = response.json().get("jetstream", {}).get("config", {})
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                raise DurabilityError(
                    f"cannot read {varz} to check that nats-server fsyncs each write: {exc!r}"
                ) from exc
            if config.get("sync_always") is True:
                log.info("nats-server at %s fsyncs every write (sync_interval: always)", url)
                continue
            problem = (
                f"nats-server at {url} does not fsync each write (its jetstream "
                "sync_interval is not 'always'): a message it acknowledged can be lost "
                "if the machine dies"
            )
            if require:
                raise DurabilityError(
                    f"{problem}. Set `jetstream {{ sync_interval: always }}` on the server, "
                    "or SHOAL_NATS_REQUIRE_SYNC_ALWAYS=false to accept that"
                )
            log.warning("%s (accepted: SHOAL_NATS_REQUIRE_SYNC_ALWAYS=false)", problem)


_SWITCHED_ON: dict[str, Feature] = {
    "allow_atomic": NATS_ATOMIC_BATCH,
    "allow_msg_ttl": NATS_MESSAGE_TTL,
}


def check_stream(info: js_api.StreamInfo, wanted: js_api.StreamConfig) -> None:
    """``DurabilityError`` when the stream's storage or replica count is not the one asked
    for, ``IncompatibleServerError`` when a feature asked for did not come back; a replica
    that is not current is logged."""
    config = info.config
    for setting, feature in _SWITCHED_ON.items():
        if getattr(wanted, setting, None) and not getattr(config, setting, None):
            raise IncompatibleServerError(
                f"stream {wanted.name}: the server dropped {setting} ({feature.name}): "
                f"every server of the cluster must be nats-server >= {feature.since}"
            )
    if config.storage != wanted.storage or (config.num_replicas or 1) != (wanted.num_replicas or 1):
        raise DurabilityError(
            f"stream {wanted.name} has storage {config.storage} with "
            f"{config.num_replicas or 1} replicas; asked for {wanted.storage} with "
            f"{wanted.num_replicas or 1}"
        )
    capped = wanted.max_bytes is not None and wanted.max_bytes > 0
    if capped and config.discard != wanted.discard:  # without a cap nothing is discarded
        raise DurabilityError(
            f"stream {wanted.name} discards {config.discard} messages when full; asked for "
            f"{wanted.discard}: a full stream would drop stored messages"
        )
    if wanted.max_bytes is not None and (config.max_bytes or -1) != wanted.max_bytes:
        raise DurabilityError(
            f"stream {wanted.name} is capped at {config.max_bytes} bytes; asked for "
            f"{wanted.max_bytes}"
        )
    replicas = (info.cluster.replicas or []) if info.cluster is not None else []
    lagging = [r.name or "?" for r in replicas if not r.current]
    if lagging:
        log.warning(
            "stream %s: replicas %s are not current (writes still need a quorum)",
            wanted.name,
            ", ".join(lagging),
        )
