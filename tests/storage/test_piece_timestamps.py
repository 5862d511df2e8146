"""The Kafka timestamps each stored piece carries: its oldest (into the block's metadata, for the
tracker's time behind) and its last (what a receiver behind reports with its heartbeat).

Record timestamps of the batches built here are ``1_000 + offset`` (see ``batch``)."""

from __future__ import annotations

from aiokafka.record.util import calc_crc32c

from sluice.records import Record
from sluice.storage.block_format import encode_kafka_piece
from tests.storage.test_kafka_batches import batch, cut, legacy


def stamps(pieces: list) -> list[tuple[int, int, int, int]]:
    return [(p.from_offset, p.until_offset, p.oldest_timestamp_ms, p.last_timestamp_ms) for p in pieces]


def test_whole_batches_give_their_first_and_newest_timestamps() -> None:
    data = batch(0, 5) + batch(5, 5)
    assert stamps(cut(data, 0, 10**9)) == [(0, 10, 1_000, 1_009)]
    assert stamps(cut(data, 0, [5] * 3)) == [(0, 5, 1_000, 1_004), (5, 10, 1_005, 1_009)]


def test_a_piece_ending_inside_a_batch_gives_that_batchs_first_timestamp_as_its_last() -> None:
    # the record after a piece that ends inside a batch is of the same batch: no older than its first
    assert stamps(cut(batch(0, 10), 0, [4] * 4)) == [(0, 4, 1_000, 1_000), (4, 8, 1_000, 1_000), (8, 10, 1_000, 1_009)]


def test_log_append_time_gives_every_record_the_batchs_max_timestamp() -> None:
    data = bytearray(batch(0, 3))
    data[22] |= 0x08  # attributes' low byte: the timestamp type is LogAppendTime
    data[35:43] = (7_000).to_bytes(8, "big")
    data[17:21] = calc_crc32c(bytes(data[21:])).to_bytes(4, "big")
    assert stamps(cut(bytes(data), 0, 10**9)) == [(0, 3, 7_000, 7_000)]


def test_legacy_messages_carry_no_timestamp() -> None:
    assert stamps(cut(legacy(0, 3), 0, 10**9)) == [(0, 3, -1, -1)]


def test_records_without_a_timestamp_are_left_out_of_the_oldest() -> None:
    def records(*timestamps: int) -> list[Record]:
        return [Record(b"k", b"v", "t", 0, i, ts) for i, ts in enumerate(timestamps)]

    piece = encode_kafka_piece(records(3_000, -1, 2_000, 2_500), ("t", 0))
    assert (piece.oldest_timestamp_ms, piece.last_timestamp_ms) == (2_000, 2_500)
    piece = encode_kafka_piece(records(-1, -1))
    assert (piece.oldest_timestamp_ms, piece.last_timestamp_ms) == (-1, -1)
