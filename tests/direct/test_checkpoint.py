"""The direct-mode checkpoint file: round trip, atomic replacement, damage named."""

from __future__ import annotations

import json

import pytest

from sluice.spark_driver.direct import OffsetRange
from sluice.spark_driver.direct.checkpoint import (
    CheckpointError,
    DirectCheckpoint,
    PendingBatch,
    checkpoint_path,
    load,
    save,
)


def sample() -> DirectCheckpoint:
    return DirectCheckpoint(
        "g",
        ("a", "b"),
        next_offsets={("a", 0): 10, ("b", 3): 7},
        committed={("a", 0): 4},
        pending=[PendingBatch(2000, (OffsetRange("a", 0, 4, 10), OffsetRange("b", 3, 7, 7)))],
        last_batch_ms=2000,
        rate=1234.5,
    )


def test_round_trip(tmp_path) -> None:
    path = checkpoint_path(tmp_path / "deep" / "dir")
    assert load(path) is None
    save(path, sample())
    assert load(path) == sample()
    save(path, DirectCheckpoint("g", ("a",)))  # replaced, no temp file left behind
    assert load(path) == DirectCheckpoint("g", ("a",))
    assert [p.name for p in path.parent.iterdir()] == [path.name]


@pytest.mark.parametrize(
    "text, match",
    [
        ("{not json", "not valid JSON"),
        ('{"version": 99}', "not a version 1"),
        ('{"version": 1, "group_id": "g", "topics": [], "next_offsets": [["a", -1, 3]]}', "next_offsets entry"),
        (
            '{"version": 1, "group_id": "g", "topics": [], "pending": [{"time_ms": 1, "ranges": [["a", 0, 5, 2]]}]}',
            "offset range",
        ),
        ('{"version": 1, "group_id": "g", "topics": [], "rate": -3}', "rate"),
        ('{"version": 1, "topics": []}', "group_id"),
    ],
)
def test_damage_is_named(tmp_path, text, match) -> None:
    path = checkpoint_path(tmp_path)
    path.write_text(text)
    with pytest.raises(CheckpointError, match=match) as err:
        load(path)
    assert str(path) in str(err.value)


def test_file_is_plain_json_for_operators(tmp_path) -> None:
    path = checkpoint_path(tmp_path)
    save(path, sample())
    data = json.loads(path.read_text())
    assert data["next_offsets"] == [["a", 0, 10], ["b", 3, 7]]
    assert data["pending"] == [{"time_ms": 2000, "ranges": [["a", 0, 4, 10], ["b", 3, 7, 7]]}]
