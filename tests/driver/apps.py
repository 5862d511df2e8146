"""Batch functions the end-to-end tests run inside a ``sluice-driver`` subprocess (``--app``).

Configured through the environment because ``--app`` names a function, not its arguments:
``SLUICE_TEST_OUT`` (output directory), ``SLUICE_TEST_MARKS`` (one file per finished write,
``<batch_time>.<records>``), ``SLUICE_TEST_HOLD_S`` (seconds to hold a batch with records after
writing, so the test can kill the driver in the middle of a batch that already wrote its output)
and ``SLUICE_TEST_HOLD_FROM`` (hold only from the n-th batch with records on, default the first:
the batches before the one a test kills need not cost the hold).
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def write_values(batch) -> None:
    batch.write_json(os.environ["SLUICE_TEST_OUT"])
    mark_and_hold(batch)


def write_to_kafka(batch) -> None:
    """``write_kafka`` twice, the same records: exactly once to ``SLUICE_TEST_EXACTLY_ONCE`` and at
    least once to ``SLUICE_TEST_AT_LEAST_ONCE`` (topics of the broker at ``SLUICE_TEST_KAFKA``),
    transactional ids named by ``SLUICE_TEST_APP``; marks and holds as ``write_values``."""
    bootstrap, app = os.environ["SLUICE_TEST_KAFKA"], os.environ["SLUICE_TEST_APP"]
    batch.write_kafka(os.environ["SLUICE_TEST_EXACTLY_ONCE"], bootstrap_servers=bootstrap, app=app)
    batch.write_kafka(os.environ["SLUICE_TEST_AT_LEAST_ONCE"], bootstrap_servers=bootstrap, mode="at_least_once")
    mark_and_hold(batch)


def mark_and_hold(batch) -> None:
    """Marks the batch as written (``SLUICE_TEST_MARKS``), then holds it as ``SLUICE_TEST_HOLD_S`` says."""
    marks = Path(os.environ["SLUICE_TEST_MARKS"])
    marks.mkdir(parents=True, exist_ok=True)
    for old in marks.glob(f"{batch.time_ms}.*"):
        old.unlink()
    (marks / f"{batch.time_ms}.{batch.num_records}").touch()
    hold = float(os.environ.get("SLUICE_TEST_HOLD_S", "0") or 0)
    if hold and batch.num_records and with_records(marks) >= int(os.environ.get("SLUICE_TEST_HOLD_FROM", "1")):
        time.sleep(hold)  # the "middle of the batch": output written, completion not yet reported


def with_records(marks: Path) -> int:
    """How many batches with records finished writing (a re-run batch counts once)."""
    return sum(1 for p in marks.iterdir() if not p.name.endswith(".0")) if marks.exists() else 0


def marked_records(marks: Path) -> int:
    """Records of all batches that finished writing (a re-run batch counts once)."""
    if not marks.exists():
        return 0
    return sum(int(p.name.split(".")[1]) for p in marks.iterdir())


def held(batch) -> None:
    """Marks each batch it starts (``SLUICE_TEST_MARKS/<batch_time>``), then holds it for as long as
    the file ``SLUICE_TEST_HOLD`` exists: a batch that lasts exactly as long as a test wants."""
    marks = Path(os.environ["SLUICE_TEST_MARKS"])
    marks.mkdir(parents=True, exist_ok=True)
    (marks / str(batch.time_ms)).touch()
    hold = Path(os.environ["SLUICE_TEST_HOLD"])
    while hold.exists():
        time.sleep(0.05)


def write_records(batch) -> None:
    """Each record the batch's tasks gave, as ``topic offset value header-keys`` lines (a key that
    is not text as ``bytes:<hex>``), in ``SLUICE_TEST_OUT/<batch_time>.txt``; marks as ``write_values``."""
    rows = batch.rdd.map(
        lambda r: " ".join(
            [
                r.topic,
                str(r.offset),
                r.value.decode(),
                *(k if isinstance(k, str) else f"bytes:{k.hex()}" for k, _ in r.headers),
            ]
        )
    ).collect()
    out = Path(os.environ["SLUICE_TEST_OUT"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{batch.time_ms}.txt").write_text("".join(f"{row}\n" for row in rows))
    marks = Path(os.environ["SLUICE_TEST_MARKS"])
    marks.mkdir(parents=True, exist_ok=True)
    (marks / f"{batch.time_ms}.{len(rows)}").touch()


def written_records(out: Path) -> list[str]:
    """The lines :func:`write_records` wrote, of every batch."""
    return sorted(line for p in out.glob("*.txt") for line in p.read_text().splitlines()) if out.exists() else []
