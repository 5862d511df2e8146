"""Blocks and record batches whose declared sizes lie: refused before anything large is built.

A block file is bytes anyone with write access to the store can forge, with a good CRC; the reader
must check every declared count and length against the bytes there are.
"""

from __future__ import annotations

import gzip
import struct
import tracemalloc
import zlib

import msgpack
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from sluice.kafka.bad_records import BadRecordError
from sluice.kafka.batch_decode import MAX_INFLATED_BATCH
from sluice.kafka.record_batches import decode_batches
from sluice.storage import block_format
from sluice.storage.block_format import CorruptFormatError, decode

MIB = 1 << 20


def forged(header: dict, payload: bytes) -> bytes:
    """A block with a good CRC around whatever header and payload it is given."""
    head = msgpack.packb(header, use_bin_type=True)
    crc = zlib.crc32(payload, zlib.crc32(head))
    return struct.pack(">8sHIQI", b"SLUICEBK", 2, len(head), len(payload), crc) + head + payload


def kafka_bomb() -> bytes:
    """149 bytes whose header declares 118 million records in a block of one partition."""
    columns = {"topics": ["t"], "partition": 0, "has_keys": False, "sections": [0, 0, 0, 0, 1, 0]}
    header = {"stream_id": 0, "block_id": "b", "offset_ranges": [], "kind": "kafka", "num_records": 118_000_000}
    return forged({**header, "columns": columns}, b"\x90")


def peak_of(call) -> tuple[str, int]:
    tracemalloc.start()
    try:
        call()
    except CorruptFormatError as exc:
        error = str(exc)
    else:
        error = ""
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return error, peak


def test_a_kafka_block_declaring_more_records_than_its_columns_hold_is_refused_before_allocating():
    data = kafka_bomb()
    assert len(data) < 160
    error, peak = peak_of(lambda: decode(data))
    assert "column 0 holds 0 bytes, not what 118000000 records take" in error
    assert peak < MIB


@pytest.mark.parametrize(
    ("what", "payload", "problem"),
    [
        ("a map among the values", msgpack.packb([{}, {}]), "not one flat array of 2 bin or nil items"),
        ("a nested array", msgpack.packb([[b"x"], None]), "not one flat array"),
        ("too few values", msgpack.packb([b"x"]), "not one flat array of 2"),
    ],
)
def test_a_kafka_value_column_holds_only_bin_and_nil(what, payload, problem):
    offsets = struct.pack("<qq", 0, 1)
    columns = {"topics": ["t"], "partition": 0, "has_keys": False}
    columns["sections"] = [16, 16, 0, 0, len(payload), 0]
    header = {"stream_id": 0, "block_id": "b", "offset_ranges": [], "kind": "kafka", "num_records": 2}
    with pytest.raises(CorruptFormatError, match=problem):
        decode(forged({**header, "columns": columns}, offsets + offsets + payload))


@pytest.mark.slow
def test_a_values_block_of_empty_maps_is_refused_past_its_budget(monkeypatch):
    """Each empty map is one byte stored and 64 bytes built: a 1 MiB block would take 72 MiB
    (the budget's floor is left out here, so the budget is 16 MiB)."""
    monkeypatch.setattr(block_format, "VALUES_BUDGET_FLOOR", 0)
    payload = msgpack.packb([{}] * MIB)
    data = forged({"stream_id": 0, "block_id": "b", "offset_ranges": [], "num_records": MIB}, payload)
    error, peak = peak_of(lambda: decode(data))
    assert "decode into more than 16 times their bytes" in error
    budget = block_format.VALUES_EXPANSION * len(payload)
    assert peak < budget + 2 * len(payload) + 8 * MIB  # the budget, the bytes and the outer list


@pytest.mark.slow
def test_ordinary_values_decode_within_the_budget():
    records = [{"user": f"u{i}", "n": i, "tags": ["a", "b"]} for i in range(50_000)]
    header, back = decode(block_format.encode(0, "b", records, ()))
    assert back == records


def gzip_batch(raw: bytes, count: int) -> bytes:
    """A v2 gzip batch whose one record's value is ``raw``; ``count`` forged into the header."""
    builder = DefaultRecordBatchBuilder(2, 1, 0, -1, -1, -1, batch_size=1 << 30)
    builder.append(0, timestamp=1, key=None, value=raw, headers=[])
    data = bytearray(builder.build())
    data[57:61] = count.to_bytes(4, "big")
    from aiokafka.record.util import calc_crc32c

    data[17:21] = calc_crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


@pytest.mark.slow
def test_a_gzip_batch_inflating_past_the_cap_is_refused_while_it_inflates():
    data = gzip_batch(bytes(MAX_INFLATED_BATCH + MIB), 1)
    assert len(data) < MAX_INFLATED_BATCH // 200
    tracemalloc.start()
    with pytest.raises(BadRecordError, match="inflates past"):
        decode_batches(data, "t", 0, 0, 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < MAX_INFLATED_BATCH + 8 * MIB


def test_a_gzip_batch_under_the_cap_reads_as_before():
    data = gzip_batch(b"v" * 1000, 1)
    assert [r.value for r in decode_batches(data, "t", 0, 0, 1)] == [b"v" * 1000]
    assert gzip.decompress(data[61:])  # it was compressed


def test_a_gzip_batch_with_a_forged_record_count_is_refused():
    with pytest.raises(BadRecordError):
        decode_batches(gzip_batch(b"v", 1_000_000), "t", 0, 0, 1)


@pytest.mark.slow
def test_a_spark_task_reading_a_149_byte_kafka_block_allocates_little(spark, tmp_path):
    """The block read in a real PySpark task: its error names the block; the task stayed small."""
    from sluice.spark_driver.block_rdd import read_block_records
    from sluice.storage.block_store import file_store_url

    store = tmp_path / "blocks"
    (store / "stream-0").mkdir(parents=True)
    (store / "stream-0" / "b.blk").write_bytes(kafka_bomb())
    url = file_store_url(store)
    ref = (url, f"{url}/stream-0/b.blk", (), "b")

    def measured(ref):
        tracemalloc.start()
        try:
            list(read_block_records(ref))
            outcome = "read"
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test looks at
            outcome = str(exc)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return outcome, peak

    [(outcome, peak)] = spark.sparkContext.parallelize([ref], 1).map(measured).collect()
    assert "block b at" in outcome and "is corrupt" in outcome
    assert peak < 16 * MIB, f"the task allocated {peak >> 20} MiB"
