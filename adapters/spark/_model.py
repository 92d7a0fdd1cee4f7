"""What the analytics return: plain frozen values, JSON-ready, importable without pyspark.

Also the two file formats other components read or write: the partition-weights file (read
by the leader's ``weighted`` strategy) and the gateway's accepted-ranges ledger.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "DEFAULT_SETTLE_SECONDS",
    "LEDGER_FIELDS",
    "WEIGHTS_FORMAT_VERSION",
    "AuditResult",
    "LostRange",
    "PartitionWeights",
    "SeriesAudit",
    "WeightsFileError",
    "load_skew",
    "nines",
    "nines_text",
    "per_million",
    "read_weights_file",
]

WEIGHTS_FORMAT_VERSION = 1

# How long after the gateway's 202 a message may still legitimately be on its way: NATS
# redelivers every ack wait (5 s) up to max-deliver (10) times, and a handoff waits for a
# lease to expire (10 s) plus a drain (8 s): ~70 s worst case, rounded up.
DEFAULT_SETTLE_SECONDS = 120.0

# The gateway's ledger (JSON Lines, one object per request that reserved sequences); see
# docs in adapters/spark/__init__.py. Field -> JSON type.
LEDGER_FIELDS: Mapping[str, str] = {
    "v": "integer (1)",
    "gateway_id": "string",
    "project_id": "string",
    "first_sequence": "integer >= 1",
    "last_sequence": "integer >= first_sequence",
    "outcome": '"accepted" (answered 202) or "refused" (answered 503: sequences burnt)',
    "received_at": "number: seconds since the epoch (the envelopes' received_at)",
    "decided_at": "number: seconds since the epoch when the answer was decided",
}


def per_million(count: int, of: int) -> float:
    """``count`` per million of ``of`` (0.0 when ``of`` is 0)."""
    return count * 1_000_000 / of if of else 0.0


def nines(lost: int, accepted: int) -> tuple[float | None, bool]:
    """``(nines, is_lower_bound)`` of delivery: ``-log10(lost / accepted)``.

    With no loss the ratio is 0 and only a bound follows from the sample: no loss among N
    accepted supports ``log10(N)`` nines (1,000,000 accepted, none lost: ">= 6 nines").
    ``(None, False)`` when nothing was accepted.
    """
    if accepted <= 0:
        return None, False
    if lost <= 0:
        return math.log10(accepted), True
    return -math.log10(lost / accepted), False


def nines_text(failed: int, accepted: int) -> str:
    """``nines`` in words; ``failed``: lost or dead-lettered."""
    value, bound = nines(failed, accepted)
    if value is None:
        return "n/a (nothing accepted)"
    if bound:
        floor = math.floor(value * 100) / 100
        return f"≥ {floor:.2f} nines (none lost or dead-lettered among {accepted:,} accepted)"
    return f"{value:.2f} nines (lost or dead-lettered: ratio {failed / accepted:.3g})"


@dataclass(frozen=True, slots=True)
class LostRange:
    """Sequences ``first..last`` of one series that were due and never landed."""

    gateway_id: str
    project_id: str
    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class SeriesAudit:
    """One (gateway_id, project_id) series."""

    gateway_id: str
    project_id: str
    accepted: int
    landed: int
    lost: int
    duplicated: int
    conflicting: int
    after_cutoff: int


@dataclass(frozen=True, slots=True)
class AuditResult:
    """Accepted sequences against landed rows; see adapters/spark/__init__ for the rules.

    ``accepted``: sequences that were due (accepted at or before the cutoff); ``landed``:
    rows landed for them, duplicates included; ``lost``: due sequences with no row;
    ``dead_lettered``: due sequences with no row that are in the transport's dead letters
    (given to the audit; not lost, but failed: the nines count them with the lost);
    ``duplicated``: rows beyond the first per due sequence; ``conflicting``: due sequences
    landed under more than one message id (a gateway bug, never expected).
    ``after_cutoff``: rows landed for sequences that were not yet due (not counted).
    Ledger mode only (None otherwise): ``in_flight`` (accepted after the cutoff, not landed
    yet), ``refused`` (sequences burnt by 503 answers), ``unacknowledged`` (rows whose
    sequence no 202 covered, e.g. a publish that timed out after the broker stored it).
    """

    data_dir: str
    mode: Literal["as-of", "drained"]
    accepted_from: Literal["sequences", "ledger"]
    as_of: datetime | None
    settle_seconds: float
    cutoff: datetime | None
    series: int
    accepted: int
    landed: int
    lost: int
    duplicated: int
    conflicting: int
    after_cutoff: int
    announcements: int
    dead_lettered: int = 0
    in_flight: int | None = None
    refused: int | None = None
    unacknowledged: int | None = None
    worst: tuple[SeriesAudit, ...] = ()
    lost_ranges: tuple[LostRange, ...] = ()
    limits: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when nothing due was lost (duplicates are expected: at-least-once)."""
        return self.lost == 0

    @property
    def lost_per_million(self) -> float:
        return per_million(self.lost, self.accepted)

    @property
    def duplicated_per_million(self) -> float:
        return per_million(self.duplicated, self.accepted)

    @property
    def failed(self) -> int:
        """Lost or dead-lettered: what the six-nines target counts."""
        return self.lost + self.dead_lettered

    @property
    def nines(self) -> str:
        return nines_text(self.failed, self.accepted)

    def to_json(self) -> dict[str, Any]:
        value, bound = nines(self.failed, self.accepted)
        return {
            "data_dir": self.data_dir,
            "mode": self.mode,
            "accepted_from": self.accepted_from,
            "as_of": _iso(self.as_of),
            "settle_seconds": self.settle_seconds,
            "cutoff": _iso(self.cutoff),
            "series": self.series,
            "accepted": self.accepted,
            "landed": self.landed,
            "lost": self.lost,
            "dead_lettered": self.dead_lettered,
            "duplicated": self.duplicated,
            "conflicting": self.conflicting,
            "lost_per_million": self.lost_per_million,
            "duplicated_per_million": self.duplicated_per_million,
            "nines": value,
            "nines_is_lower_bound": bound,
            "nines_text": self.nines,
            "after_cutoff": self.after_cutoff,
            "announcements": self.announcements,
            "in_flight": self.in_flight,
            "refused": self.refused,
            "unacknowledged": self.unacknowledged,
            "ok": self.ok,
            "worst_series": [
                {
                    "gateway_id": s.gateway_id,
                    "project_id": s.project_id,
                    "accepted": s.accepted,
                    "landed": s.landed,
                    "lost": s.lost,
                    "duplicated": s.duplicated,
                    "conflicting": s.conflicting,
                    "after_cutoff": s.after_cutoff,
                }
                for s in self.worst
            ],
            "lost_ranges": [
                {
                    "gateway_id": r.gateway_id,
                    "project_id": r.project_id,
                    "first": r.first,
                    "last": r.last,
                }
                for r in self.lost_ranges
            ],
            "limits": list(self.limits),
        }


@dataclass(frozen=True, slots=True)
class PartitionWeights:
    """Measured load per partition, scaled so the mean over all ``partitions`` is 1.0.

    ``weights[p] = max(load_p / mean_load, floor)`` for every p in 0..partitions-1 (the
    floor keeps a partition that was idle while measured from weighing nothing).
    """

    partitions: int
    metric: Literal["rows", "bytes"]
    floor: float
    weights: Mapping[int, float]
    loads: Mapping[int, int]
    measured_from: Mapping[str, Any]
    generated_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The weights file (format ``WEIGHTS_FORMAT_VERSION``)."""
        return {
            "version": WEIGHTS_FORMAT_VERSION,
            "partitions": self.partitions,
            "metric": self.metric,
            "floor": self.floor,
            "weights": {str(p): self.weights[p] for p in range(self.partitions)},
            "loads": {str(p): self.loads.get(p, 0) for p in range(self.partitions)},
            "measured_from": dict(self.measured_from),
            "generated_at": _iso(self.generated_at),
        }

    def write(self, path: Path) -> None:
        """Write the file atomically (temporary name, then rename)."""
        temp = path.with_name(f".{path.name}.tmp")
        temp.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        temp.replace(path)


class WeightsFileError(ValueError):
    """The weights file is missing, not JSON, or not in the format."""


_KEY = re.compile(r"0|[1-9][0-9]*")


def read_weights_file(path: Path, partitions: int | None = None) -> dict[int, float]:
    """Partition -> weight from a file written by ``shoal analytics weights``.

    Checks the format: ``partitions`` (when given) must equal the file's, every key a
    partition number below it, every weight a finite number >= 0. Raises ``WeightsFileError``.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WeightsFileError(f"cannot read weights file {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WeightsFileError(f"weights file {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("weights"), dict):
        raise WeightsFileError(f'weights file {path} must be an object with a "weights" object')
    declared = data.get("partitions")
    if isinstance(declared, bool) or not isinstance(declared, int) or declared < 1:
        raise WeightsFileError(f'weights file {path}: "partitions" must be a positive integer')
    if partitions is not None and declared != partitions:
        raise WeightsFileError(
            f"weights file {path} was measured for {declared} partitions, not {partitions}"
        )
    weights: dict[int, float] = {}
    for key, value in data["weights"].items():
        if not _KEY.fullmatch(key) or int(key) >= declared:
            raise WeightsFileError(f"weights file {path}: {key!r} is not a partition < {declared}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WeightsFileError(f"weights file {path}: weight of {key} is not a number")
        if not math.isfinite(value) or value < 0:
            raise WeightsFileError(f"weights file {path}: weight of {key} must be finite, >= 0")
        weights[int(key)] = float(value)
    return weights


def load_skew(owned: Mapping[str, Sequence[int]], loads: Mapping[int, float]) -> float:
    """max / mean of the members' summed partition loads (1.0 is perfectly even)."""
    totals = [sum(loads.get(p, 0) for p in parts) for parts in owned.values()]
    if not totals or sum(totals) == 0:
        return 0.0
    return max(totals) / (sum(totals) / len(totals))


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
