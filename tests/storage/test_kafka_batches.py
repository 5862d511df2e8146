"""Record batches stored as fetched: cutting them into pieces without records, decoding them on read.

The batches are built by aiokafka's own record builders, the bytes a broker sends.
"""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from sluice.block_info import OffsetRange
from sluice.kafka.bad_records import BadRecordError
from sluice.kafka.record_batches import BatchFormatError, batch_pieces, decode_batches, scan_batches
from sluice.records import Record
from sluice.storage.block_format import CorruptFormatError, FormatError, decode, encode, encode_kafka_piece

TOPIC = "t"


def batch(
    base: int, deltas: list[int] | int, *, control: bool = False, keys: bool = True, compression: int = 0
) -> bytes:
    """A v2 batch at ``base`` with records at ``base + delta`` (``n``: deltas 0..n-1); value = offset."""
    deltas = list(range(deltas)) if isinstance(deltas, int) else deltas
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for delta in deltas:
        offset = base + delta
        builder.append(
            delta, timestamp=1_000 + offset, key=b"k%d" % offset if keys else None, value=b"%d" % offset, headers=[]
        )
    data = bytearray(builder.build())
    data[0:8] = base.to_bytes(8, "big", signed=True)
    if control:
        data[22] |= 0x20  # attributes' low byte: the control flag
        data[17:21] = calc_crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


def legacy(base: int, n: int) -> bytes:
    """``n`` uncompressed magic-1 messages at offsets ``base..base+n-1``."""
    out = b""
    for offset in range(base, base + n):
        builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
        builder.append(0, timestamp=1_000 + offset, key=b"k%d" % offset, value=b"%d" % offset)
        entry = bytearray(builder.build())
        entry[0:8] = offset.to_bytes(8, "big")
        out += bytes(entry)
    return out


def read(piece) -> list[int]:
    return [r.offset for r in decode_batches(piece.data, TOPIC, 0, piece.from_offset, piece.until_offset)]


def cut(data: bytes, position: int, sizes) -> list:
    sizes = iter(sizes) if not isinstance(sizes, int) else None
    size = (lambda: next(sizes)) if sizes is not None else (lambda: 10**9)
    return list(batch_pieces(TOPIC, 0, data, position, size))


def test_a_scan_reads_each_batch_header_and_leaves_out_a_truncated_last_batch():
    data = batch(0, 5) + batch(5, 3) + batch(8, 4)
    spans = list(scan_batches(data))
    assert [(s.base_offset, s.next_offset, s.num_records) for s in spans] == [(0, 5, 5), (5, 8, 3), (8, 12, 4)]
    assert spans[-1].end == len(data)
    assert [s.next_offset for s in scan_batches(data[:-1])] == [5, 8]  # a broker cut the response there
    assert list(scan_batches(data[:10])) == []


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\0" * 16 + b"\x07" + b"\0" * 60, "magic 7: Kafka knows 0, 1 and 2"),
        ((0).to_bytes(8, "big") + (20).to_bytes(4, "big") + b"\0" * 4 + b"\x02" + b"\0" * 60, "fewer than the 49"),
    ],
)
def test_bytes_that_are_not_batches_are_refused_by_name(data, problem):
    with pytest.raises(BatchFormatError, match=problem):
        list(scan_batches(data))


def test_whole_batches_go_into_pieces_of_at_most_the_size_each_asked_again():
    data = batch(0, 5) + batch(5, 5) + batch(10, 5)
    sizes = [10, 7, 100]
    pieces = cut(data, 0, sizes)
    assert [(p.from_offset, p.until_offset, p.num_records) for p in pieces] == [(0, 10, 10), (10, 15, 5)]
    assert [read(p) for p in pieces] == [list(range(10)), list(range(10, 15))]
    assert pieces[0].nbytes == len(batch(0, 5)) + len(batch(5, 5))  # whole batches, no record built


def test_a_fetch_that_starts_inside_a_batch_counts_and_reads_only_from_its_position():
    pieces = cut(batch(0, 10) + batch(10, 5), 7, 100)
    assert [(p.from_offset, p.until_offset, p.num_records) for p in pieces] == [(7, 15, 8)]
    assert read(pieces[0]) == list(range(7, 15))
    assert cut(batch(0, 10), 10, 100) == []  # a batch the broker resent whole though the fetch is past it


def test_a_batch_larger_than_a_piece_is_split_by_offsets_and_nothing_is_read_twice():
    data = batch(0, 4) + batch(4, 10) + batch(14, 2)
    pieces = cut(data, 0, [5, 3, 3, 3, 3, 100])
    ranges = [(p.from_offset, p.until_offset, p.num_records) for p in pieces]
    assert ranges == [(0, 4, 4), (4, 7, 3), (7, 10, 3), (10, 13, 3), (13, 14, 1), (14, 16, 2)]
    assert [o for p in pieces for o in read(p)] == list(range(16))
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # the pieces tile the partition


def test_compacted_batches_count_the_records_they_hold_not_their_offsets():
    data = batch(0, [0, 3, 4, 9]) + batch(10, [1, 2])
    pieces = cut(data, 0, 100)
    assert [(p.from_offset, p.until_offset, p.num_records) for p in pieces] == [(0, 13, 6)]
    assert read(pieces[0]) == [0, 3, 4, 9, 11, 12]
    split = cut(data, 2, [2, 2, 100])
    assert [(p.from_offset, p.until_offset, p.num_records) for p in split] == [(2, 9, 2), (9, 10, 1), (10, 13, 2)]
    assert [o for p in split for o in read(p)] == [3, 4, 9, 11, 12]


def test_control_batches_hold_no_record_but_move_the_position():
    only_control = cut(batch(0, 1, control=True), 0, 100)
    assert [(p.from_offset, p.until_offset, p.num_records) for p in only_control] == [(0, 1, 0)]
    mixed = cut(batch(0, 3) + batch(3, 1, control=True) + batch(4, 2), 0, 100)
    assert [(p.from_offset, p.until_offset, p.num_records) for p in mixed] == [(0, 6, 5)]
    assert read(mixed[0]) == [0, 1, 2, 4, 5]


def test_compressed_batches_are_cut_by_their_headers_and_decompressed_on_read():
    gzip = 1
    data = batch(0, 50, compression=gzip) + batch(50, 50, compression=gzip)
    pieces = cut(data, 20, [40, 100])
    assert [(p.from_offset, p.until_offset, p.num_records) for p in pieces] == [(20, 50, 30), (50, 100, 50)]
    assert [o for p in pieces for o in read(p)] == list(range(20, 100))


def test_legacy_messages_are_counted_by_decoding_them_and_read_like_batches():
    data = legacy(0, 3) + legacy(3, 3)
    assert [(s.base_offset, s.next_offset, s.num_records) for s in scan_batches(data)] == [
        (o, o + 1, 1) for o in range(6)
    ]
    pieces = cut(data, 2, [3, 100])
    assert [(p.from_offset, p.until_offset, p.num_records) for p in pieces] == [(2, 5, 3), (5, 6, 1)]
    assert [o for p in pieces for o in read(p)] == [2, 3, 4, 5]


def test_decoding_gives_records_with_their_fields_and_checks_each_batch_crc():
    records = decode_batches(batch(5, 2) + batch(7, 1, keys=False), TOPIC, 3, 5, 8)
    assert records == [
        Record(b"k5", b"5", TOPIC, 3, 5, 1_005),
        Record(b"k6", b"6", TOPIC, 3, 6, 1_006),
        Record(None, b"7", TOPIC, 3, 7, 1_007),
    ]
    damaged = bytearray(batch(0, 5) + batch(5, 5))
    damaged[-3] ^= 0xFF  # a value byte of the second batch
    with pytest.raises(BadRecordError, match="t/0 offsets 5-9 .*the record batch at offset 5 fails its CRC check"):
        decode_batches(bytes(damaged), TOPIC, 0, 0, 10)
    with pytest.raises(BatchFormatError, match="not whole"):
        decode_batches(batch(0, 5)[:-2], TOPIC, 0, 0, 5)
    with pytest.raises(BatchFormatError, match="magic 114"):
        decode_batches(b"garbage" * 20, TOPIC, 0, 0, 5)


def test_a_block_of_batch_pieces_reads_back_the_records_of_each_range():
    first = cut(batch(0, 10), 4, 100)[0]
    other = list(batch_pieces("u", 1, batch(100, 3), 100, lambda: 100))[0]
    ranges = (OffsetRange(TOPIC, 0, 4, 10), OffsetRange("u", 1, 100, 103))
    header, records = decode(encode(7, "input-7-r-0", [first, other], ranges))
    assert header["kind"] == "kafka-batches" and header["num_records"] == 9 and header["offset_ranges"] == ranges
    assert [(r.topic, r.partition, r.offset) for r in records] == [
        *((TOPIC, 0, o) for o in range(4, 10)),
        *(("u", 1, o) for o in range(100, 103)),
    ]


def test_a_block_whose_segments_disagree_with_its_batches_is_corrupt_not_short():
    piece = cut(batch(0, 5), 0, 100)[0]
    wrong = type(piece)(piece.topic, piece.partition, piece.data, piece.from_offset, piece.until_offset, 4)
    with pytest.raises(CorruptFormatError, match="the header counts 4 records, the batches hold 5"):
        decode(encode(0, "input-0-r-0", [wrong], ()))


def test_a_block_never_mixes_batch_pieces_with_column_pieces_or_records():
    piece = cut(batch(0, 2), 0, 100)[0]
    columns = encode_kafka_piece([Record(None, b"x", TOPIC, 0, 0, 0)])
    with pytest.raises(FormatError, match="record batches and something else"):
        encode(0, "b", [piece, columns], ())
    with pytest.raises(FormatError, match="encoded Kafka pieces and something else"):
        encode(0, "b", [columns, piece], ())
