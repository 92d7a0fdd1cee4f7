"""Admin calls of the Kafka transport: topics, and committed offsets read robustly.

Committed offsets: aiokafka 0.14's ``list_consumer_group_offsets`` and its consumer's
``committed()`` check only the per-partition error codes of an OffsetFetch response. A
group-level error (``COORDINATOR_LOAD_IN_PROGRESS`` right after a broker restart, from
OffsetFetch v2 on it is in the top-level ``error_code``) then reads as "no committed
offset", and a consumer would start again from the earliest offset. ``committed`` checks
both levels and retries retriable errors until its deadline. (It uses the admin client's
``_send_request``: one private call, aiokafka is pinned.)
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from adapters.kafka._aiokafka import (
    AIOKafkaAdminClient,
    ConfigResource,
    ConfigResourceType,
    KafkaError,
    NewTopic,
    OffsetFetchRequest,
    for_code,
)
from adapters.kafka._settings import KafkaSettings
from core.errors import DurabilityError

__all__ = ["committed", "create_topics", "ensure_topics"]

log = logging.getLogger("shoal.adapters.kafka")

_TOPIC_ALREADY_EXISTS = 36
_RETRIABLE_DESCRIBE = {3, 5}  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE (just created)


def _error(code: int, text: str) -> Exception:
    err: Exception = for_code(code)(text)
    return err


async def ensure_topics(admin: Any, settings: KafkaSettings) -> None:
    """Create the data, dead-letter and registration topics when missing (``create_topics``
    on), then check that the data topic has exactly ``settings.partitions`` partitions and
    keeps what shoal relies on (``_check_durability``)."""
    s = settings
    if s.create_topics:
        base = {"min.insync.replicas": str(s.min_insync_replicas), **s.topic_config}
        wanted = [
            NewTopic(
                s.topic,
                s.partitions,
                s.replication_factor,
                topic_configs={**base, **s.data_topic_config()},
            ),
            NewTopic(s.dead_letter_topic, 1, s.replication_factor, topic_configs=base),
            NewTopic(
                s.registration_topic,
                1,
                s.replication_factor,
                topic_configs={**base, "retention.ms": str(3600 * 1000)},
            ),
        ]
        await create_topics(admin, s, wanted)
    replicas = await _check_partitions(admin, s)
    await _check_durability(admin, s, replicas)


async def create_topics(admin: Any, settings: KafkaSettings, topics: list[Any]) -> None:
    """Create each of ``topics`` (``NewTopic``s) that is missing; one that exists is left
    as it is. The broker's refusal of any other raises its ``KafkaError``."""
    response = await admin.create_topics(topics, timeout_ms=settings.ms(settings.request_timeout))
    for item in response.topic_errors:
        name, code = item[0], int(item[1])
        message = item[2] if len(item) > 2 else None
        if code == 0:
            log.info("created topic %s", name)
        elif code != _TOPIC_ALREADY_EXISTS:
            raise _error(code, f"cannot create topic {name}: {message}")


async def _check_durability(admin: Any, s: KafkaSettings, replicas: int) -> None:
    """``DurabilityError`` when the data topic, as the brokers keep it (created by shoal
    or by someone else), has fewer replicas or in-sync replicas than configured, or lets
    an out-of-sync replica become leader: an unclean election hands out offsets again that
    were landed already."""
    resource = ConfigResource(ConfigResourceType.TOPIC, s.topic)
    (response,) = await admin.describe_configs([resource])
    (found,) = response.resources
    code, message, configs = found[0], found[1], found[4]
    if code != 0:
        raise _error(code, f"cannot describe the configuration of topic {s.topic}: {message}")
    config = {entry[0]: entry[1] for entry in configs}
    problems = []
    if replicas < s.replication_factor:
        problems.append(f"{replicas} replicas (configured: {s.replication_factor})")
    in_sync = int(config.get("min.insync.replicas") or 1)
    if in_sync < s.min_insync_replicas:
        problems.append(f"min.insync.replicas={in_sync} (configured: {s.min_insync_replicas})")
    if str(config.get("unclean.leader.election.enable", "false")).lower() == "true":
        problems.append("unclean.leader.election.enable=true")
    if problems:
        raise DurabilityError(
            f"Kafka topic {s.topic!r} has {', '.join(problems)}: acknowledged or landed "
            "offsets could be lost or handed out again. Alter the topic, or use another "
            "(SHOAL_KAFKA_TOPIC)."
        )


async def _check_partitions(admin: Any, s: KafkaSettings) -> int:
    """The data topic's replica count, once it has the configured partitions, all led."""
    deadline = anyio.current_time() + s.request_timeout
    while True:
        (info,) = await admin.describe_topics([s.topic])
        code = int(info.get("error_code", 0))
        if code == 0:
            count = len(info.get("partitions", ()))
            if count != s.partitions:
                raise ValueError(
                    f"Kafka topic {s.topic!r} has {count} partitions but shoal is configured "
                    f"for {s.partitions} (SHOAL_PARTITIONS / SHOAL_KAFKA_PARTITIONS): a "
                    "project would land in another partition than on NATS. Use a new "
                    "topic (SHOAL_KAFKA_TOPIC) or the topic's partition count."
                )
            leaderless = [p for p in info["partitions"] if int(p.get("leader", -1)) < 0]
            if not leaderless:
                return min(len(p.get("replicas", ())) for p in info["partitions"])
            if anyio.current_time() >= deadline:
                raise TimeoutError(
                    f"{len(leaderless)} partitions of topic {s.topic} have no leader after "
                    f"{s.request_timeout} s"
                )
            # just created: wait for the leaders, or the first sends fail and retry
            # (NotLeaderForPartitionError)
            await anyio.sleep(s.retry_backoff)
            continue
        if code not in _RETRIABLE_DESCRIBE or anyio.current_time() >= deadline:
            if code == 3:
                raise ValueError(
                    f"Kafka topic {s.topic!r} does not exist (and create_topics is off)"
                )
            raise _error(code, f"cannot describe topic {s.topic}")
        await anyio.sleep(s.retry_backoff)


async def committed(
    admin: AIOKafkaAdminClient,
    group_id: str,
    topic: str,
    partitions: list[int],
    *,
    within: float,
    backoff: float,
    coordinators: dict[str, int] | None = None,
) -> dict[int, tuple[int, str]]:
    """partition -> (committed offset, metadata) for the partitions that have a commit.

    Retries retriable errors (coordinator loading or moving, broker not ready) until
    ``within`` seconds; raises ``TimeoutError`` after that, ``KafkaError`` on other errors.
    ``coordinators`` caches the group's coordinator node (dropped on any error)."""
    cache = {} if coordinators is None else coordinators
    deadline = anyio.current_time() + within
    last: BaseException | None = None
    while anyio.current_time() < deadline:
        try:
            with anyio.fail_after(max(deadline - anyio.current_time(), 0.001)):
                return await _committed_once(admin, group_id, topic, partitions, cache)
        except KafkaError as exc:
            cache.pop(group_id, None)
            if not getattr(exc, "retriable", False):
                raise
            last = exc
        except TimeoutError as exc:
            cache.pop(group_id, None)
            last = exc
            break
        await anyio.sleep(backoff)
    raise TimeoutError(
        f"committed offsets of group {group_id} not readable within {within} s: {last!r}"
    )


async def _committed_once(
    admin: Any, group_id: str, topic: str, partitions: list[int], cache: dict[str, int]
) -> dict[int, tuple[int, str]]:
    coordinator = cache.get(group_id)
    if coordinator is None:
        coordinator = cache[group_id] = int(await admin.find_coordinator(group_id))
    response = await admin._send_request(
        OffsetFetchRequest(group_id, [(topic, list(partitions))]), coordinator
    )
    top = int(getattr(response, "error_code", 0) or 0)
    if top:
        raise _error(top, f"OffsetFetch for group {group_id}")
    out: dict[int, tuple[int, str]] = {}
    for t, parts in response.topics:
        for partition, offset, metadata, code in parts:
            if code:
                raise _error(int(code), f"OffsetFetch for {t}/{partition} in group {group_id}")
            if t == topic and offset >= 0:
                out[int(partition)] = (int(offset), str(metadata or ""))
    return out
