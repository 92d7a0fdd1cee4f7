"""The fault matrix: which fault rows apply to which backend pair, and which of them a run
takes.

A row is ``PAIR:FAULT`` (``etcd+nats:leader_killed``). ``tox -e faults`` runs every row of
every pair. ``bin/test`` runs the tier (``--fault-rows tier``): every row of the default
pair, the rows the default pair has no store for (a proxy cut-off needs an etcd or Redis
store) on one pair that has them, and a window of the other pairs' rows. Both the pair for
the missing kinds and the window move with the commit (its number in ``git rev-list
--count HEAD``), so consecutive commits run every row of the matrix between them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "CLUSTER_PAIR",
    "DEFAULT_PAIR",
    "PAIRS",
    "SAMPLE_ROWS",
    "commit_number",
    "describe",
    "rows_of",
    "select",
]

PAIRS = (
    "nats+nats",
    "etcd+nats",
    "redis+nats",
    "kafka+kafka",
    "nats+kafka",
    "etcd+kafka",
    "redis+kafka",
    "nats3+nats3",
)
DEFAULT_PAIR = "nats+nats"  # shoal up's and the services' default
# The default pair on a 3-node cluster at three replicas (tests/faults/_faults.py,
# ``cluster_settings``): its rows are its own, one server of the cluster SIGKILLed.
CLUSTER_PAIR = "nats3+nats3"
_CLUSTER_ROWS = ("stream_leader_killed", "follower_killed", "kv_leader_killed_in_rebalance")
SAMPLE_ROWS = 2  # rows of the other pairs a tier run takes, besides the default pair's

# In the order a run injects them: each starts and ends on a settled pool.
_EVERY_PAIR = (
    "handler_killed",
    "handler_paused_past_lease",
    "handler_paused_briefly",
    "leader_killed",
    "leader_paused_past_lease",
    "poison_message",
    "handler_churn",
    "gateway_killed",
)
# A TcpProxy can cut a process off from these (NATS KV: its coordination connection alone,
# SHOAL_NATS_KV_URL, while its transport keeps SHOAL_NATS_URL).
_PROXIED_STORES = ("nats", "etcd", "redis")


def rows_of(pair: str) -> tuple[str, ...]:
    """Every fault row that applies to ``pair`` (``COORDINATION+TRANSPORT``), in order."""
    if pair == CLUSTER_PAIR:
        return _CLUSTER_ROWS
    coordination, transport = pair.split("+")
    rows = list(_EVERY_PAIR)
    if coordination in _PROXIED_STORES:
        rows += ["handler_cut_off", "leader_cut_off"]
    if coordination == "redis":  # an ACL can make one user's hold writes fail
        rows.append("release_refused")
    if transport == "nats":  # a size cap with discard: new (Kafka deletes by retention)
        rows.append("stream_full")
    if coordination == transport:
        rows.append("server_restarted")
    else:
        rows += ["store_restarted", "broker_restarted"]
    return tuple(rows)


def _kind(row: str) -> str:
    """A server restart is one kind, whichever servers the pair has."""
    return "server_restarted" if row.endswith("_restarted") else row


def commit_number(root: Path) -> int:
    """The commit's number (``git rev-list --count HEAD``); 0 outside a git checkout.
    ``SHOAL_FAULT_SAMPLE`` overrides it (to rerun another commit's sample)."""
    if override := os.environ.get("SHOAL_FAULT_SAMPLE"):
        return int(override)
    try:
        done = subprocess.run(
            ["git", "rev-list", "--count", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return 0
    return int(done.stdout.strip() or 0)


def _tier(number: int) -> dict[str, list[str]]:
    chosen: dict[str, list[str]] = {DEFAULT_PAIR: list(rows_of(DEFAULT_PAIR))}
    # The kinds the default pair lacks, on one pair that has them all, alternating (the
    # cluster's rows are the cluster pair's alone: they come with the window below).
    single = [p for p in PAIRS if p != CLUSTER_PAIR]
    covered = {_kind(r) for r in rows_of(DEFAULT_PAIR)}
    kinds = list(dict.fromkeys(r for p in single for r in rows_of(p) if _kind(r) not in covered))
    having = [p for p in single if set(kinds) <= set(rows_of(p))]
    gap_pair = having[number % len(having)]
    chosen[gap_pair] = [r for r in rows_of(gap_pair) if r in kinds]
    # A window of the other rows, pair after pair: the windows of consecutive numbers
    # tile the list, so every row runs within len(others) / SAMPLE_ROWS commits.
    others = [(p, r) for p in PAIRS if p != DEFAULT_PAIR for r in rows_of(p)]
    windows = -(-len(others) // SAMPLE_ROWS)
    start = (number % windows) * SAMPLE_ROWS
    for pair, row in others[start : start + SAMPLE_ROWS]:
        chosen.setdefault(pair, [])
        if row not in chosen[pair]:
            chosen[pair].append(row)
    return {p: [r for r in rows_of(p) if r in rows] for p, rows in chosen.items()}


def select(spec: str, number: int) -> dict[str, list[str]]:
    """The rows to run by pair, in the matrix's order. ``spec``: ``all``, ``tier``, or a
    comma-separated list of ``PAIR`` (its every row) and ``PAIR:FAULT``. Raises
    ``ValueError`` naming an unknown pair or fault."""
    if spec == "all":
        return {p: list(rows_of(p)) for p in PAIRS}
    if spec == "tier":
        return _tier(number)
    wanted: dict[str, set[str]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        pair, _, row = item.partition(":")
        if pair not in PAIRS:
            raise ValueError(f"unknown pair {pair!r} in --fault-rows; pairs: {', '.join(PAIRS)}")
        if row and row not in rows_of(pair):
            raise ValueError(
                f"{pair} has no fault row {row!r}; its rows: {', '.join(rows_of(pair))}"
            )
        wanted.setdefault(pair, set()).update([row] if row else rows_of(pair))
    return {p: [r for r in rows_of(p) if r in wanted[p]] for p in PAIRS if p in wanted}


def describe(selection: Mapping[str, Sequence[str]]) -> list[str]:
    """Lines that say which rows run and how to run one alone."""
    lines = [f"FAULT ROWS {pair}: {', '.join(rows)}" for pair, rows in selection.items()]
    pair, rows = next(iter(selection.items()))
    lines.append(f"one row alone: bin/test -e faults -- --fault-rows {pair}:{rows[0]}")
    return lines
