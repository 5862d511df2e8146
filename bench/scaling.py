"""Ingest with 1, 2 and 4 receiver processes over 8 partitions, against the CPU seconds they used.

A topic of 8 partitions holds a backlog; ``K`` ``sluice-receiver`` processes (Kafka source, one
consumer group, 200 ms blocks, ``file://`` store with fsync) ingest it into a ``sluice-tracker``
(fsync on) until every record is in an acknowledged block.  Records/s run from the first
acknowledged record to the last (the group's first join is not counted; rebalances while the
others join are); CPU seconds are everything the receivers and the tracker used from their start
to the last acknowledgement (``/proc``), start-up and joining included: a process more costs its
start-up too, and the CPU of fetches before the first acknowledgement is not lost.
The machine has 2 cores: where records/s stop growing and CPU seconds per record grow instead,
that is the limit, not hidden.  Rounds rotate the order of 1, 2 and 4; each ``K > 1`` line has
``K = 1`` of the same rounds as its peer, so ``ratio`` is the speed-up.

    .venv/bin/python bench/scaling.py [--quick] [--rounds 5] [--records 3000000] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from harness import add_bootstrap, cpu_seconds, figure, fresh_topic, kafka, options, order, parser, produce, say

from sluice.embedded import receiver_argv, start_service, start_tracker, stop_process
from sluice.tracker.client.sync_client import SyncTrackerClient

PARTITIONS = 8
COUNTS = (1, 2, 4)


def ingested(client: SyncTrackerClient) -> int:
    """Records in acknowledged, unallocated blocks of stream 0 (nothing allocates them here)."""
    streams = client.status()["streams"]
    stream = streams.get(0, streams.get("0"))
    return int(stream["unallocated_records"]) if stream else 0


def run(bootstrap: str, topic: str, records: int, processes: int, tmp: Path, timeout: float) -> tuple[float, float]:
    """(records/s, CPU seconds) for ``processes`` receivers ingesting the whole topic."""
    tmp.mkdir()
    tracker = start_tracker(tmp / "wal", args=["--log-level", "WARNING"], block_store=(tmp / "blocks").as_uri())
    group = f"scaling-{time.time_ns()}"
    receivers = [
        start_service(
            receiver_argv(
                tracker.address,
                bootstrap=bootstrap,
                topic=topic,
                group=group,
                block_store=(tmp / "blocks").as_uri(),
                receiver_id=f"k{k}",
                extra=["--log-level", "WARNING"],
            ),
            log=tmp / f"receiver{k}.log",
        )
        for k in range(processes)
    ]
    pids = [tracker.proc.pid] + [r.pid for r in receivers]
    try:
        with SyncTrackerClient(tracker.address, "admin") as client:
            deadline = time.monotonic() + timeout
            while (seen := ingested(client)) == 0:
                if time.monotonic() > deadline or any(r.poll() is not None for r in receivers):
                    raise RuntimeError(
                        f"no record ingested; receiver log: "
                        f"{(tmp / 'receiver0.log').read_text(errors='replace')[-2000:]}"
                    )
                time.sleep(0.02)
            first, first_records = time.perf_counter(), seen
            while (seen := ingested(client)) < records:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{seen} of {records} records ingested in {timeout:.0f} s")
                time.sleep(0.02)
            elapsed, cpu = time.perf_counter() - first, sum(map(cpu_seconds, pids))
            if seen == first_records:
                raise RuntimeError(f"all {records} records came in one block: too few to time (--records)")
    finally:
        for r in receivers:
            stop_process(r)
        tracker.stop()
    return (records - first_records) / elapsed, cpu


def main() -> None:
    p = parser(__doc__)
    p.add_argument(
        "--records", type=int, default=None, help="records in the backlog (default 3,000,000; --quick 1,000,000)"
    )
    add_bootstrap(p)
    args = options(p)
    records = args.records or (1_000_000 if args.quick else 3_000_000)
    rates: dict[int, list[float]] = {k: [] for k in COUNTS}
    cpus: dict[int, list[float]] = {k: [] for k in COUNTS}
    per_cpu: dict[int, list[float]] = {k: [] for k in COUNTS}
    with kafka(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory(prefix="sluice-bench-scaling-") as tmp:
        topic = fresh_topic("scaling")
        asyncio.run(produce(bootstrap, topic, PARTITIONS, records))
        say(f"produced {records:,} records of ~100 bytes to {PARTITIONS} partitions")
        for r in range(args.rounds):
            for k in order(r, list(COUNTS)):
                rate, cpu = run(bootstrap, topic, records, k, Path(tmp) / f"r{r}-k{k}", timeout=300)
                rates[k].append(rate)
                cpus[k].append(cpu)
                per_cpu[k].append(records / max(cpu, 0.01))  # /proc counts in 10 ms ticks
                say(f"  round {r + 1}, {k} receiver process(es): {rate:,.0f} records/s, {cpu:.2f} CPU s")
    for k in COUNTS:
        line = figure(
            "scaling",
            f"ingest, {k} receiver process(es), {PARTITIONS} partitions",
            "records/s",
            rates[k],
            peer=rates[1] if k > 1 else None,
            peer_name="1 receiver process, same rounds" if k > 1 else None,
            digits=0,
            processes=k,
            records=records,
            cpu_seconds={
                "median": round(statistics.median(cpus[k]), 2),
                "min": round(min(cpus[k]), 2),
                "max": round(max(cpus[k]), 2),
                "runs": [round(c, 2) for c in cpus[k]],
            },
            records_per_cpu_second=round(statistics.median(per_cpu[k])),
        )
        say(
            f"{k} process(es): {line['median']:,.0f} records/s ({line['min']:,.0f}-{line['max']:,.0f}), "
            f"{line['cpu_seconds']['median']:.2f} CPU s, {line['records_per_cpu_second']:,} records per CPU second"
            + (f", x{line['ratio']:.2f} one process" if k > 1 else "")
        )


if __name__ == "__main__":
    main()
