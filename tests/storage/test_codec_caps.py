"""Compressed Kafka batches of every codec inflate under the cap: a small batch that would inflate far
past it is refused while it inflates (the memory it took stays near the cap, not the bomb's size),
an ordinary batch reads its records, and a missing codec package is an error naming the package."""

from __future__ import annotations

import sys
import tracemalloc

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from sluice.kafka import batch_decode
from sluice.kafka.bad_records import BadRecordError
from sluice.kafka.record_batches import BatchFormatError, decode_batches

MIB = 1 << 20
CAP = 4 * MIB  # the cap these tests read under: a bomb 16 times past it shows where reading stops
CODECS = {
    "gzip": DefaultRecordBatch.CODEC_GZIP,
    "snappy": DefaultRecordBatch.CODEC_SNAPPY,
    "lz4": DefaultRecordBatch.CODEC_LZ4,
    "zstd": DefaultRecordBatch.CODEC_ZSTD,
}
PACKAGES = {"snappy": ("cramjam", "cramjam"), "lz4": ("lz4.frame", "lz4"), "zstd": ("zstandard", "zstandard")}


@pytest.fixture(autouse=True)
def small_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_decode, "MAX_INFLATED_BATCH", CAP)


def batch(codec: str, values: list[bytes], base_offset: int = 0) -> bytes:
    """A v2 batch of ``values`` (record i keyed ``k<i>``, one header) compressed with ``codec``."""
    builder = DefaultRecordBatchBuilder(2, CODECS[codec], 0, -1, -1, -1, batch_size=1 << 30)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1000 + i, key=b"k%d" % i, value=value, headers=[("h", b"%d" % i)])
    data = bytearray(builder.build())
    data[0:8] = base_offset.to_bytes(8, "big")  # outside the CRC
    assert data[22] & 0x07 == CODECS[codec]
    return bytes(data)


@pytest.mark.slow
@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_inflating_far_past_the_cap_is_refused_while_it_inflates(codec: str) -> None:
    data = batch(codec, [bytes(16 * CAP)])
    assert len(data) < CAP  # snappy's 32 KiB blocks compress least: 3 MiB
    tracemalloc.start()
    try:
        with pytest.raises(BadRecordError, match=f"record batch at offset 0 inflates past {CAP} bytes: refused"):
            decode_batches(data, "t", 0, 0, 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < CAP + 4 * MIB, peak  # the 64 MiB of records were never built


@pytest.mark.parametrize("codec", CODECS)
def test_an_ordinary_batch_of_each_codec_reads_its_records(codec: str) -> None:
    values = [b"value %d " % i * 50 for i in range(200)]
    data = batch(codec, values, base_offset=500)
    assert len(data) < sum(map(len, values)) // 4  # it was compressed
    records = decode_batches(data, "t", 3, 500, 700)
    assert [r.value for r in records] == values
    assert [(r.key, r.offset, r.timestamp_ms, r.headers) for r in records[:2]] == [
        (b"k0", 500, 1000, (("h", b"0"),)),
        (b"k1", 501, 1001, (("h", b"1"),)),
    ]
    assert {(r.topic, r.partition) for r in records} == {("t", 3)}


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_just_under_the_cap_reads(codec: str) -> None:
    value = bytes(CAP - 100)  # the record's own fields take the rest
    assert [r.value for r in decode_batches(batch(codec, [value]), "t", 0, 0, 1)] == [value]


@pytest.mark.parametrize("codec", PACKAGES)
def test_a_missing_codec_package_is_an_unreadable_batch_naming_the_package(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = batch(codec, [b"v"], base_offset=7)
    module, package = PACKAGES[codec]
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    with pytest.raises(BatchFormatError, match=f"offset 7 is {codec}-compressed and the {package} package is not"):
        decode_batches(data, "t", 0, 7, 8)


def test_a_snappy_block_declaring_more_than_the_cap_is_refused_before_it_inflates() -> None:
    """One raw (unframed) snappy block whose size varint claims past the cap: refused on its word."""
    import cramjam

    builder = DefaultRecordBatchBuilder(2, DefaultRecordBatch.CODEC_NONE, 0, -1, -1, -1, batch_size=1 << 30)
    builder.append(0, timestamp=1, key=None, value=b"v", headers=[])
    plain = bytearray(builder.build())
    records = bytes(cramjam.snappy.compress_raw(bytes(plain[61:])))
    claim = CAP + 1
    varint = bytes([(claim & 0x7F) | 0x80, (claim >> 7 & 0x7F) | 0x80, (claim >> 14 & 0x7F) | 0x80, claim >> 21])
    forged = plain[:61] + varint + records[1:]  # its first byte was the real size (under 128)
    forged[8:12] = (len(forged) - 12).to_bytes(4, "big")
    forged[22] |= DefaultRecordBatch.CODEC_SNAPPY
    from aiokafka.record.util import calc_crc32c

    forged[17:21] = calc_crc32c(bytes(forged[21:])).to_bytes(4, "big")
    with pytest.raises(BadRecordError, match="inflates past"):
        decode_batches(bytes(forged), "t", 0, 0, 1)
