"""What reading a block of header floods costs: 8 MiB of record batches whose records carry many
empty headers (2 bytes each in a batch), decoded as a Spark task decodes a receiver block.

    .venv/bin/python bench/header_memory.py [--quick] [--rounds 3] [--headers 1000]

One JSON line: the traced peak of decoding the block (Sluice's decoder, its headers under the
block's budget; the records past it are left to ``driver.bad_records``) in times the block's bytes,
and as the peer the same batches decoded whole by aiokafka's parser into records and header tuples,
which is what a block cost before the budget.  Also the records each gave and left out.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from harness import figure, options, order, parser, say

from sluice.block_info import OffsetRange
from sluice.kafka.record_batches import KafkaBatches
from sluice.storage.block_format import decode, encode

BATCH_BYTES = 1 << 20  # Kafka's default message.max.bytes


def flood_batches(headers_per_record: int, total: int) -> tuple[bytes, int]:
    """At least ``total`` bytes of 1 MiB batches of records with ``headers_per_record`` empty
    headers each; the bytes and the record count."""
    parts: list[bytes] = []
    offset = size = 0
    while size < total:
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, BATCH_BYTES)
        delta = 0
        while builder.append(delta, timestamp=1, key=None, value=b"v", headers=[("", None)] * headers_per_record):
            delta += 1
        data = bytearray(builder.build())
        data[0:8] = offset.to_bytes(8, "big")
        parts.append(bytes(data))
        size += len(data)
        offset += delta
    return b"".join(parts), offset


def sluice_decode(block: bytes) -> tuple[int, int]:
    bad: list = []
    _, records = decode(block, bad)
    return len(records), sum(b.num_offsets for b in bad)


def aiokafka_whole(batches: bytes) -> tuple[int, int]:
    """Every batch parsed whole and its records kept with their headers as tuples."""
    kept: list = []
    parsed = MemoryRecords(batches)
    while parsed.has_next():
        batch = parsed.next_batch()
        assert batch is not None
        kept += [(r.key, r.value, r.offset, r.timestamp, tuple(r.headers)) for r in batch]
    return len(kept), 0


def peak_of(run: Callable[[], tuple[int, int]]) -> tuple[int, tuple[int, int]]:
    gc.collect()
    tracemalloc.start()
    try:
        counts = run()
        return tracemalloc.get_traced_memory()[1], counts
    finally:
        tracemalloc.stop()


def main() -> None:
    p = parser(__doc__, rounds=3)
    p.add_argument("--headers", type=int, default=1000, help="empty headers per record (default 1000)")
    p.add_argument("--mib", type=int, default=None, help="MiB of batches (default 8; --quick 2)")
    args = options(p)
    mib = args.mib or (2 if args.quick else 8)
    batches, count = flood_batches(args.headers, mib << 20)
    piece = KafkaBatches("t", 0, memoryview(batches), 0, count, count)
    block = encode(0, "b", [piece], (OffsetRange("t", 0, 0, count),))
    say(f"{len(batches) / 2**20:.1f} MiB of batches, {count} records of {args.headers} empty headers")
    sides = {"sluice": lambda: sluice_decode(block), "aiokafka": lambda: aiokafka_whole(batches)}
    peaks: dict[str, list[float]] = {name: [] for name in sides}
    counts: dict[str, tuple[int, int]] = {}
    for round_no in range(args.rounds):
        for name in order(round_no, list(sides)):
            peak, counts[name] = peak_of(sides[name])
            peaks[name].append(peak / len(batches))
    figure(
        "header_memory",
        f"decode peak, {mib} MiB of batches of {args.headers} empty headers a record",
        "x batch bytes",
        peaks["sluice"],
        peer=peaks["aiokafka"],
        peer_name="aiokafka, whole",
        digits=1,
        batch_mib=round(len(batches) / 2**20, 1),
        records=count,
        decoded=counts["sluice"][0],
        left_out=counts["sluice"][1],
    )


if __name__ == "__main__":
    main()
