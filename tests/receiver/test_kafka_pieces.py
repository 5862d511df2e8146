"""Kafka records encoded into block-format pieces when fetched, assembled into blocks when pushed."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from pathlib import Path

import pytest

from sluice.block_info import OffsetRange
from sluice.clock import ManualClock
from sluice.config import SECTIONS, ConfigError, resolve
from sluice.durable import atomic_write
from sluice.receiver.block_generator import BlockGeneratorError
from sluice.records import Record
from sluice.settings import ReceiverSettings
from sluice.storage import block_format
from sluice.storage.block_format import FormatError, KafkaPiece, encode_kafka_piece, encode_parts
from sluice.storage.block_store import Block, FileBlockStore
from tests.receiver.test_block_generator import INTERVAL, RecordingListener, make


def records(topic: str, partition: int, start: int, count: int, *, keys: bool = False) -> list[Record]:
    return [
        Record(b"k%d" % i if keys and i % 2 else None, b"value %d" % i, topic, partition, i, 1_700_000_000_000 + i)
        for i in range(start, start + count)
    ]


MIXES = {
    "one partition": [records("t", 0, 0, 10), records("t", 0, 10, 7)],
    "partitions, keys in one piece": [records("t", 0, 0, 5), records("t", 1, 0, 20, keys=True), records("t", 2, 3, 1)],
    "topics, one piece mixed": [
        records("a", 0, 0, 4),
        records("b", 3, 9, 3),
        records("a", 0, 4, 2) + records("c", 1, 0, 3),
    ],
    "array headers of every size": [records("t", 0, 0, 15), records("t", 1, 0, 70_000, keys=True)],
}


@pytest.mark.parametrize("pieces", MIXES.values(), ids=MIXES.keys())
def test_a_block_of_pieces_is_byte_for_byte_the_block_of_their_records(pieces: list[list[Record]]):
    """Encoding when fetched changes nothing on disk: readers of the format see the same bytes."""
    flat = [r for piece in pieces for r in piece]
    ranges = (OffsetRange("t", 0, 0, 17),)
    encoded = [encode_kafka_piece(p) for p in pieces]
    assert b"".join(encode_parts(3, "b", encoded, ranges)) == b"".join(encode_parts(3, "b", flat, ranges))
    header, back = block_format.decode(b"".join(encode_parts(3, "b", encoded, ranges)))
    assert back == flat and header["num_records"] == len(flat)


def test_a_piece_told_its_partition_is_the_piece_of_the_same_records_read_field_by_field():
    fetched = records("t", 7, 0, 30, keys=True)
    told, read = encode_kafka_piece(fetched, ("t", 7)), encode_kafka_piece(fetched)
    assert b"".join(encode_parts(0, "b", [told], ())) == b"".join(encode_parts(0, "b", [read], ()))
    assert (told.topics, told.partition) == (("t",), 7)


def test_a_piece_counts_the_bytes_it_adds_to_a_block():
    piece = encode_kafka_piece(records("t", 0, 0, 1000, keys=True))
    assert piece.num_records == 1000 and piece.partition == 0 and piece.topics == ("t",)
    payload = b"".join(encode_parts(0, "b", [piece], ())[2:])  # after the preamble and the header
    assert piece.nbytes == len(payload) - 2 * 3  # less the value and key arrays' 3-byte headers


def test_a_block_of_more_pieces_than_writev_takes_is_written_whole(tmp_path: Path):
    """One buffer per column per piece: 3,000 pieces are more buffers than one writev accepts (IOV_MAX)."""
    pieces = [records("t", i % 4, i, 1, keys=True) for i in range(3000)]
    store = FileBlockStore(tmp_path)
    location = store.write(Block(0, "many", [encode_kafka_piece(p) for p in pieces]))
    assert store.read(location).records == [r for p in pieces for r in p]


def test_atomic_write_takes_more_buffers_than_iov_max(tmp_path: Path):
    atomic_write(tmp_path / "f", [b"%d," % i for i in range(5000)], fsync=False)
    assert (tmp_path / "f").read_bytes() == b"".join(b"%d," % i for i in range(5000))


def test_pieces_and_records_in_one_block_or_an_empty_piece_are_refused_clearly():
    piece = encode_kafka_piece(records("t", 0, 0, 2))
    with pytest.raises(FormatError, match="encoded Kafka pieces and something else"):
        encode_parts(0, "b", [piece, *records("t", 0, 2, 1)], ())
    with pytest.raises(FormatError, match="at least one record"):
        encode_kafka_piece([])
    with pytest.raises(FormatError, match="cannot be stored"):
        encode_kafka_piece([Record(None, object(), "t", 0, 0, 0)])


async def stop(gen, clock: ManualClock) -> None:
    """Stop ``gen``: its timer makes the last block at the next tick, which the manual clock brings."""
    stopping = asyncio.create_task(gen.stop())
    await clock.wait_for_sleepers()
    clock.advance(INTERVAL)
    await asyncio.wait_for(stopping, 5)


@pytest.mark.parametrize("max_block_records", [10**9, 50])
async def test_the_buffer_waits_at_max_block_bytes_and_goes_on_after_the_cut(max_block_records: int):
    """Encoded pieces are bounded by their bytes only: 50 records per block would otherwise cap a
    receiver at 250 records/s however small they are."""
    clock, listener = ManualClock(0), RecordingListener()
    piece = encode_kafka_piece(records("t", 0, 0, 100))
    gen = make(clock, listener, max_block_bytes=3 * piece.nbytes, max_block_records=max_block_records)
    gen.start()
    for _ in range(3):
        await gen.add_encoded_with_callback(piece, None)
    assert gen.buffered_bytes == 3 * piece.nbytes and gen.buffered_records == 300
    fourth = asyncio.create_task(gen.add_encoded_with_callback(piece, None))
    await clock.wait_for_sleepers()
    assert not fourth.done()  # the buffer is full in bytes (not in records)
    clock.advance(INTERVAL)  # the cut frees the buffer
    await asyncio.wait_for(fourth, 5)
    await listener.wait_for(lambda: len(listener.pushed) == 1)
    assert all(type(p) is KafkaPiece for p in listener.pushed[0][1]) and len(listener.pushed[0][1]) == 3
    assert gen.buffered_bytes == piece.nbytes and gen.buffered_records == 100
    await stop(gen, clock)


async def test_without_a_byte_limit_encoded_pieces_wait_at_max_block_records():
    clock, listener = ManualClock(0), RecordingListener()
    piece = encode_kafka_piece(records("t", 0, 0, 100))
    gen = make(clock, listener, max_block_bytes=None, max_block_records=150)
    gen.start()
    await gen.add_encoded_with_callback(piece, None)
    await gen.add_encoded_with_callback(piece, None)  # 100 < 150 held: admitted
    third = asyncio.create_task(gen.add_encoded_with_callback(piece, None))
    await clock.wait_for_sleepers()
    assert not third.done() and gen.buffered_records == 200
    clock.advance(INTERVAL)
    await asyncio.wait_for(third, 5)
    await stop(gen, clock)


async def test_text_records_count_their_bytes_and_one_block_never_mixes_records_and_pieces():
    clock, listener = ManualClock(0), RecordingListener()
    gen = make(clock, listener, max_block_bytes=10)
    gen.start()
    await gen.add_multiple_data_with_callback(["12345", "678"], None)
    await gen.add_data("9")
    assert gen.buffered_bytes == 9 and gen.buffered_records == 3
    with pytest.raises(BlockGeneratorError, match="not a mix"):
        await gen.add_encoded_with_callback(encode_kafka_piece(records("t", 0, 0, 1)), None)
    assert gen.buffered_records == 3  # the refused piece is not buffered
    await stop(gen, clock)
    assert listener.pushed == [("input-0-r1-0", ["12345", "678", "9"])]


@pytest.mark.parametrize(("setting", "expected"), [(None, 64 << 20), ("1000", 1000), ("0", None)])
def test_receiver_max_block_bytes_reaches_the_block_generator(setting: str | None, expected: int | None):
    environ = {} if setting is None else {"SLUICE_RECEIVER_MAX_BLOCK_BYTES": setting}
    assert ReceiverSettings.from_config(resolve(SECTIONS, environ=environ)).max_block_bytes == expected


def test_a_negative_max_block_bytes_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"receiver.max_block_bytes.*0 or more"):
        resolve(SECTIONS, environ={"SLUICE_RECEIVER_MAX_BLOCK_BYTES": "-1"})


@pytest.mark.slow
def test_a_buffer_of_pieces_takes_under_half_the_memory_of_the_consumer_records():
    """The concepts guide's "about a third": 10,000 records of 100-byte values, as ConsumerRecords and as pieces."""
    from aiokafka.structs import ConsumerRecord

    def fetched() -> list:
        return [
            ConsumerRecord("topic", 0, i, 1_700_000_000_000 + i, 0, None, b"%100d" % i, None, 0, 100, ())
            for i in range(10_000)
        ]

    def traced(build) -> int:
        gc.collect()
        tracemalloc.start()
        try:
            held = build()
            gc.collect()
            size = tracemalloc.get_traced_memory()[0]
            del held
            return size
        finally:
            tracemalloc.stop()

    def pieces() -> list:
        records = fetched()
        return [encode_kafka_piece(records[i : i + 1000]) for i in range(0, len(records), 1000)]

    as_records, as_pieces = traced(fetched), traced(pieces)
    assert as_pieces < 0.5 * as_records, (as_pieces, as_records)
