"""Block store throughput: the S3 store (s3fs, against moto's server on loopback) and ``file://``, same run.

    .venv/bin/python bench/block_store.py [--quick] [--rounds 5] [--small-blocks 200] [--large-blocks 20]

Small blocks hold 100 Kafka records (about 13 KB), large ones 20,000 (about 2.6 MB).  Each round
writes then reads every block through each store, the stores alternating round by round; one JSON
line per case and operation: S3's blocks/s over the rounds (median, min, max, runs) and MB/s, the
file store's as the peer, ``ratio`` = S3 / file.  The file store fsyncs each block; moto keeps
objects in memory and answers on loopback, so the ratio is the S3 client path (HTTP, signing,
s3fs) against a durable local write, not a remote bucket's latency.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

from harness import figure, options, order, parser, say

from sluice.block_info import OffsetRange
from sluice.records import Record
from sluice.storage.block_store import Block, open_block_store
from sluice.testing import start_moto

CASES = {"small": 100, "large": 20_000}


def blocks(case: str, count: int, round_no: int) -> list[Block]:
    n = CASES[case]
    records = [Record(b"key-%d" % i, b"v" * 100, "bench", 0, i, 1_700_000_000_000 + i) for i in range(n)]
    return [Block(0, f"{case}-{round_no}-{b}", records, (OffsetRange("bench", 0, 0, n),)) for b in range(count)]


def measure(store, batch: list[Block]) -> dict[str, float]:
    """Seconds to write, then to read, every block (write = encode + store, as a receiver does)."""
    t0 = time.perf_counter()
    locations = [store.write(block) for block in batch]
    t1 = time.perf_counter()
    for location in locations:
        store.read(location)
    t2 = time.perf_counter()
    for location in locations:  # not measured: the next round starts empty
        store.delete(location)
    return {"write": t1 - t0, "read": t2 - t1}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--small-blocks", type=int, default=None, help="default 200; --quick 10")
    p.add_argument("--large-blocks", type=int, default=None, help="default 20; --quick 2")
    args = options(p)
    counts = {
        "small": args.small_blocks or (10 if args.quick else 200),
        "large": args.large_blocks or (2 if args.quick else 20),
    }
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-store-"))
    moto = start_moto(work)
    try:
        stores = {
            "file": open_block_store((work / "blocks").as_uri()),
            "s3": open_block_store(f"s3://{moto.bucket('bench')}/blocks", moto.options),
        }
        for case, count in counts.items():
            measure(stores["s3"], blocks(case, 2, -1))  # warm-up: client session, connection pool
            seconds: dict[str, dict[str, list[float]]] = {name: {"write": [], "read": []} for name in stores}
            for round_no in range(args.rounds):
                batch = blocks(case, count, round_no)
                for name in order(round_no, list(stores)):
                    for op, value in measure(stores[name], batch).items():
                        seconds[name][op].append(value)
            size = sum(len(p) for p in stores["file"].encode(blocks(case, 1, 0)[0])) / 1e6
            for op in ("write", "read"):
                s3, file = ([count / s for s in seconds[name][op]] for name in ("s3", "file"))
                line = figure(
                    "block_store",
                    f"{case} blocks {op}",
                    "blocks/s",
                    s3,
                    peer=file,
                    peer_name="file:// store (fsync)",
                    digits=1,
                    store="s3 (s3fs, moto on loopback)",
                    blocks=count,
                    block_mb=round(size, 4),
                    mb_per_s=round(line_mb(s3, size), 2),
                    peer_mb_per_s=round(line_mb(file, size), 2),
                )
                say(
                    f"{case} blocks ({size:.3f} MB) {op}: s3 {line['median']:,.1f} blocks/s ({line['mb_per_s']} MB/s), "
                    f"file {line['peer']['median']:,.1f} blocks/s -> ratio {line['ratio']:.3f}"
                )
    finally:
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)


def line_mb(rates: list[float], size_mb: float) -> float:
    """Median MB/s of a series of blocks/s."""
    return statistics.median(rates) * size_mb


if __name__ == "__main__":
    main()
