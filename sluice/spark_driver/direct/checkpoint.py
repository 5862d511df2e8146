"""The direct-mode driver checkpoint: where each partition resumes and which batches are in flight.

Spark checkpoints a ``DirectKafkaInputDStream``'s generated RDDs (their offset ranges) so that a
restarted driver regenerates the batches that were running with exactly the same ranges.  Sluice
keeps the same facts in one small JSON file, replaced atomically (temp file, fsync, rename, fsync
of the directory) so that a driver killed at any instant finds either the old or the new state,
never a torn one:

* ``next_offsets``: the offset after the last *created* batch, per partition: where the next
  batch starts (Spark's ``currentOffsets``);
* ``pending``: batches created but not completed, with their ranges.  The file is written before
  a batch is handed to the driver, so a batch that ran (even partly, even with output written) is
  always re-run on restart with the same time and ranges; the idempotent sinks, which replace a
  batch time's output, then hold each record once;
* ``committed``: the offsets before the oldest pending batch, which each completed batch commits
  to the group (the checkpoint holds them even when a commit fails);
* ``rate``: the last published rate, so a restart does not start unbounded.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.block_info import InvalidMessage
from sluice.durable import atomic_write
from sluice.errors import SluiceError
from sluice.kafka.offsets import OffsetRange, TopicPartition

VERSION = 1
FILE_NAME = "direct-kafka.json"


class CheckpointError(SluiceError, RuntimeError):
    """The checkpoint file cannot be read or does not belong to this stream; the message says which."""


@dataclass(frozen=True)
class PendingBatch:
    """A batch created but not completed: its time and its ranges."""

    time_ms: int
    ranges: tuple[OffsetRange, ...]


@dataclass
class DirectCheckpoint:
    """The state of one direct stream, as kept on disk."""

    group_id: str
    topics: tuple[str, ...]
    next_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    pending: list[PendingBatch] = field(default_factory=list)
    last_batch_ms: int | None = None
    rate: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "group_id": self.group_id,
            "topics": list(self.topics),
            "next_offsets": _offsets_out(self.next_offsets),
            "committed": _offsets_out(self.committed),
            "pending": [{"time_ms": p.time_ms, "ranges": [r.to_wire() for r in p.ranges]} for p in self.pending],
            "last_batch_ms": self.last_batch_ms,
            "rate": self.rate,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> DirectCheckpoint:
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise CheckpointError(f"{where}: not a version {VERSION} direct-kafka checkpoint")
        try:
            rate = data.get("rate")
            if rate is not None and (not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0):
                raise InvalidMessage(f"rate must be a number of 0 or more, got {rate!r}")
            last = data.get("last_batch_ms")
            if last is not None and not isinstance(last, int):
                raise InvalidMessage(f"last_batch_ms must be an integer, got {last!r}")
            pending = []
            for i, p in enumerate(data.get("pending", [])):
                if not isinstance(p, dict) or not isinstance(p.get("time_ms"), int):
                    raise InvalidMessage(f"pending[{i}] must be a map with an integer time_ms")
                ranges = tuple(OffsetRange.from_wire(r, f"pending[{i}].ranges") for r in p.get("ranges", []))
                pending.append(PendingBatch(p["time_ms"], ranges))
            group_id, topics = data["group_id"], data["topics"]
            if not isinstance(group_id, str) or not isinstance(topics, list):
                raise InvalidMessage("group_id must be a string and topics a list")
            return cls(
                group_id=group_id,
                topics=tuple(str(t) for t in topics),
                next_offsets=_offsets_in(data.get("next_offsets", []), "next_offsets"),
                committed=_offsets_in(data.get("committed", []), "committed"),
                pending=sorted(pending, key=lambda p: p.time_ms),
                last_batch_ms=last,
                rate=None if rate is None else float(rate),
            )
        except (InvalidMessage, KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{where} is damaged: {exc}") from None


def _offsets_out(offsets: dict[TopicPartition, int]) -> list[list[Any]]:
    return [[t, p, o] for (t, p), o in sorted(offsets.items())]


def _offsets_in(rows: Any, name: str) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    if not isinstance(rows, list):
        raise InvalidMessage(f"{name} must be a list of [topic, partition, offset]")
    for row in rows:
        if (
            not isinstance(row, list)
            or len(row) != 3
            or not isinstance(row[0], str)
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in row[1:])
        ):
            raise InvalidMessage(f"{name} entry {row!r} must be [topic, partition >= 0, offset >= 0]")
        out[(row[0], row[1])] = row[2]
    return out


def checkpoint_path(checkpoint_dir: str | os.PathLike[str]) -> Path:
    return Path(checkpoint_dir) / FILE_NAME


def load(path: str | os.PathLike[str]) -> DirectCheckpoint | None:
    """The checkpoint at ``path``, or None when there is none yet."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"checkpoint {path} cannot be read: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"checkpoint {path} is not valid JSON: {exc}") from None
    return DirectCheckpoint.from_json(data, f"checkpoint {path}")


def save(path: str | os.PathLike[str], checkpoint: DirectCheckpoint) -> None:
    """Replace ``path`` atomically: temp file in the same directory, fsync, rename, fsync dir."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps(checkpoint.to_json(), separators=(",", ":")).encode("utf-8")
    atomic_write(target, payload)
