"""Records that cannot be decoded, one by one: the batches are built byte by byte
(:mod:`sluice.testing.record_batches`), since no client makes them."""

from __future__ import annotations

import logging
import tracemalloc
from pathlib import Path

import msgpack
import pytest

from sluice.block_info import OffsetRange
from sluice.kafka.bad_records import BadRecordError, BadRecordPolicy
from sluice.kafka.batch_decode import HEADER_BYTES, HEADER_FLOOR
from sluice.kafka.record_batches import KafkaBatches, batch_pieces, decode_batches
from sluice.records import Record
from sluice.spark_driver.batch import record_to_row
from sluice.storage.block_format import decode, encode
from sluice.storage.block_store import FileBlockStore
from sluice.storage.dead_letters import BadRecordHandling
from sluice.testing.record_batches import batch, framed, record, record_body, varint

NOT_UTF8 = b"\xff\xfekey"


def poisoned(base: int = 10) -> bytes:
    """Offsets 10-13 (from ``base``): a plain record, one with a header key that is not UTF-8, one that counts 5
    headers it does not have, a plain one."""
    return batch(
        base,
        [
            record(0, b"a", b"k", [(b"h", b"v")]),
            record(1, b"b", None, [(NOT_UTF8, None), (b"ok", b"")]),
            framed(record_body(2, b"c", header_count=5)),
            record(3, b"d"),
        ],
    )


def test_a_header_key_that_is_not_utf8_is_kept_as_bytes_and_its_batch_decodes() -> None:
    records = decode_batches(batch(0, [record(0, b"a", headers=[(NOT_UTF8, b"x"), (b"trace", b"t")])]), "t", 0, 0, 1)
    assert records == [Record(None, b"a", "t", 0, 0, 1_000, ((NOT_UTF8, b"x"), ("trace", b"t")))]


def test_the_same_headers_come_back_from_a_kafka_block_of_records() -> None:
    rows = [Record(b"k", b"v", "t", 0, 5, 1, ((NOT_UTF8, None), ("trace", b"t")))]
    assert decode(encode(1, "b", rows, (OffsetRange("t", 0, 5, 6),)))[1] == rows


def test_dataframes_read_such_a_key_as_spark_does_and_the_batch_function_gets_the_bytes() -> None:
    row = record_to_row(Record(None, b"v", "t", 0, 1, 1, ((NOT_UTF8, b"x"),)), include_headers=True)
    assert row[-1] == [("\ufffd\ufffdkey", b"x")]


def test_an_undecodable_record_is_reported_alone_with_its_coordinates_and_bytes() -> None:
    bad: list = []
    records = decode_batches(poisoned(), "t", 3, 10, 14, bad)
    assert [r.offset for r in records] == [10, 11, 13]
    assert records[1].headers == ((NOT_UTF8, None), ("ok", b""))
    [item] = bad
    assert (item.topic, item.partition, item.offset, item.until_offset, item.value) == ("t", 3, 12, 13, b"c")
    assert item.raw == framed(record_body(2, b"c", header_count=5))  # byte for byte, its length first
    assert "5 headers" in item.reason


def test_under_fail_the_error_names_topic_partition_and_offset() -> None:
    with pytest.raises(BadRecordError, match=r"Kafka record t/3 offset 12 cannot be decoded: it counts 5 headers"):
        decode_batches(poisoned(), "t", 3, 10, 14)
    assert [r.offset for r in decode_batches(poisoned(), "t", 3, 13, 14)] == [13]  # outside the range: not ours


def test_a_record_without_a_readable_length_loses_the_rest_of_its_batch_only() -> None:
    broken = batch(0, [record(0, b"a"), varint(10_000) + b"short", record(2, b"c")])
    bad: list = []
    records = decode_batches(broken + batch(3, [record(0, b"d")]), "t", 0, 0, 4, bad)
    assert [r.value for r in records] == [b"a", b"d"]
    assert [(b.offset, b.until_offset) for b in bad] == [(1, 3)]
    assert bad[0].raw.startswith(varint(10_000) + b"short")


def test_a_batch_failing_its_crc_is_one_bad_run_and_the_next_batch_decodes() -> None:
    damaged = bytearray(batch(0, [record(0, b"a"), record(1, b"b")]))
    damaged[-1] ^= 0xFF
    bad: list = []
    records = decode_batches(bytes(damaged) + batch(2, [record(0, b"c")]), "t", 0, 0, 3, bad)
    assert [r.offset for r in records] == [2]
    assert [(b.offset, b.until_offset, b.raw) for b in bad] == [(0, 2, bytes(damaged))]
    assert "fails its CRC check" in bad[0].reason


def test_a_receiver_cuts_a_batch_with_such_records_without_failing() -> None:
    pieces = list(batch_pieces("t", 0, poisoned(), 11, lambda: 2))  # starts inside it: its offsets are decoded
    assert [(p.from_offset, p.until_offset) for p in pieces] == [(11, 13), (13, 14)]


def test_a_block_reads_past_a_bad_record_and_gives_it_to_the_reader() -> None:
    piece = KafkaBatches("t", 3, memoryview(poisoned()), 10, 14, 4)
    block = encode(1, "b", [piece], (OffsetRange("t", 3, 10, 14),))
    bad: list = []
    assert [r.offset for r in decode(block, bad)[1]] == [10, 11, 13]
    assert [b.offset for b in bad] == [12]
    with pytest.raises(BadRecordError, match="t/3 offset 12"):
        decode(block)


def flood(headers_per_record: int, target: int) -> tuple[bytes, int]:
    """About ``target`` bytes of 256 KiB batches whose records carry empty headers, and their
    record count."""
    empty = [(b"", None)] * headers_per_record
    per_batch = (256 << 10) // (2 * headers_per_record + 8)
    batches = -(-target // (256 << 10))
    parts = [batch(i * per_batch, [record(d, b"v", headers=empty) for d in range(per_batch)]) for i in range(batches)]
    return b"".join(parts), per_batch * batches


@pytest.mark.slow
def test_header_floods_decode_under_the_budget_and_the_rest_are_bad_runs() -> None:
    data, count = flood(1000, 2 << 20)
    tracemalloc.start()
    bad: list = []
    try:
        records = decode_batches(data, "t", 0, 0, 1 << 40, bad)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    decoded = sum(len(r.headers) for r in records)
    assert 0 < decoded <= HEADER_FLOOR + len(data) // HEADER_BYTES
    assert len(bad) < 32 and all("past the block's budget" in b.reason for b in bad)  # runs, not one per record
    assert len(records) + sum(b.num_offsets for b in bad) == count  # every offset decoded or reported
    assert peak < 12 * len(data), f"{peak / len(data):.1f} times the batches' bytes"  # decoded whole: 33 times


def test_skip_logs_once_per_block(caplog: pytest.LogCaptureFixture) -> None:
    bad: list = []
    decode_batches(poisoned() + poisoned(14), "t", 0, 0, 99, bad)
    with caplog.at_level(logging.WARNING, "sluice.storage.dead_letters"):
        BadRecordHandling(BadRecordPolicy.SKIP).handle(bad, 0, "b-1", "in block b-1")
    assert len(caplog.records) == 1 and "2 Kafka record(s)" in caplog.text and "t/0 offset 12" in caplog.text


def test_dead_letters_keep_each_record_byte_for_byte_in_one_file_per_block(tmp_path: Path) -> None:
    bad: list = []
    decode_batches(poisoned(), "t", 3, 10, 14, bad)
    store = FileBlockStore(tmp_path / "dead")
    BadRecordHandling(BadRecordPolicy.DEAD_LETTER, store.url).handle(bad, 7, "b-1", "in block b-1")
    kept = store.read(store.location_of(7, "b-1"))
    assert kept.offset_ranges == (OffsetRange("t", 3, 12, 13),)
    [entry] = kept.records
    assert entry["raw"] == framed(record_body(2, b"c", header_count=5))
    assert (entry["topic"], entry["partition"], entry["offset"], entry["value"]) == ("t", 3, 12, b"c")
    assert msgpack.unpackb(msgpack.packb(entry, use_bin_type=True), raw=False) == entry


def test_fail_names_the_record_and_the_block() -> None:
    bad: list = []
    decode_batches(poisoned(), "t", 3, 10, 14, bad)
    with pytest.raises(BadRecordError, match=r"t/3 offset 12 cannot be decoded \(in block b-1\).*driver.bad_records"):
        BadRecordHandling().handle(bad, 0, "b-1", "in block b-1")
