"""Partition weights from measured load, and what they do to the assignment's balance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.spark import (
    PartitionWeights,
    SparkAnalytics,
    WeightsFileError,
    load_skew,
    read_weights_file,
)
from core.assignment import AssignmentOptions, AssignmentRequest, strategy_named
from tests.spark.conftest import SKEWED_LOADS, SKEWED_PARTITIONS

MEMBERS = ["m1", "m2", "m3", "m4"]


@pytest.fixture(scope="module")
def measured(analytics: SparkAnalytics, skewed_dir: Path) -> PartitionWeights:
    return analytics.weights(skewed_dir, partitions=SKEWED_PARTITIONS)


def test_weights_follow_the_load(measured: PartitionWeights) -> None:
    mean = sum(SKEWED_LOADS) / SKEWED_PARTITIONS
    assert dict(measured.loads) == dict(enumerate(SKEWED_LOADS))
    for p, load in enumerate(SKEWED_LOADS):
        assert measured.weights[p] == pytest.approx(max(load / mean, 0.05), abs=1e-6)
    assert measured.measured_from["rows"] == sum(SKEWED_LOADS)


def test_weighted_assignment_balances_measured_load(measured: PartitionWeights) -> None:
    loads = {p: float(load) for p, load in enumerate(SKEWED_LOADS)}
    sticky = strategy_named("sticky").assign(AssignmentRequest.of(SKEWED_PARTITIONS, MEMBERS))
    weighted = strategy_named("weighted").assign(
        AssignmentRequest.of(
            SKEWED_PARTITIONS,
            MEMBERS,
            options=AssignmentOptions(partition_weights=dict(measured.weights)),
        )
    )
    before = load_skew(sticky.assignment.by_member(), loads)
    after = load_skew(weighted.assignment.by_member(), loads)
    # The heaviest partition (4000 of 14,700 rows) bounds any assignment at 4000 / 3675.
    best = max(SKEWED_LOADS) / (sum(SKEWED_LOADS) / len(MEMBERS))
    assert after < before
    assert after == pytest.approx(best, abs=0.02)
    assert before > 1.3


def test_file_round_trip(measured: PartitionWeights, tmp_path: Path) -> None:
    path = tmp_path / "weights.json"
    measured.write(path)
    document = json.loads(path.read_text())
    assert document["version"] == 1
    assert document["partitions"] == SKEWED_PARTITIONS
    assert list(document["weights"]) == [str(p) for p in range(SKEWED_PARTITIONS)]
    assert read_weights_file(path, SKEWED_PARTITIONS) == dict(measured.weights)
    with pytest.raises(WeightsFileError, match="measured for 16 partitions, not 128"):
        read_weights_file(path, 128)
    document["weights"]["16"] = 1.0
    path.write_text(json.dumps(document))
    with pytest.raises(WeightsFileError, match="not a partition < 16"):
        read_weights_file(path)
