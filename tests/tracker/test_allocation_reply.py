"""The columnar allocate_blocks reply: what the tracker encodes the driver decodes to the same
blocks, and a reply that is wrong anywhere is refused with the stream, column and entry named."""

from __future__ import annotations

import copy
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.block_columns import BlockColumns
from sluice.block_info import InvalidMessage, OffsetRange, ReceivedBlockInfo
from sluice.tracker.log.events import Event, event_from_wire
from sluice.tracker.server.received_block_tracker import ReceivedBlockTracker
from sluice.tracker.server.stream_queue import StreamQueue
from sluice.tracker.wire.allocation_reply import (
    decode_allocation,
    encode_columns,
    uints,
)


def block(
    stream: int, i: int, *, ranges: int = 1, receiver: str = "r0", metadata: dict | None = None
) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(
        stream,
        f"b{stream}-{i}",
        receiver,
        10 * ranges,
        f"file:///blocks/{stream}/b{i}.blk",
        tuple(OffsetRange(f"topic-{k % 2}", k, 10 * i, 10 * i + 10) for k in range(ranges)),
        metadata or {},
    )


ALLOCATION = {
    3: [block(3, 0), block(3, 1, ranges=3, receiver="r1", metadata={"note": [1, 2]}), block(3, 2, ranges=0)],
    0: [],
    7: [block(7, 0, receiver="r1"), block(7, 1, metadata={"k": "v"})],
}


def encode_allocation(allocation: dict[int, list[ReceivedBlockInfo]]) -> dict[str, Any]:
    """The columnar reply for ``allocation`` (stream id -> its blocks in order), as the tracker
    encodes its kept columns."""
    return dict(encode_columns(list(allocation), [BlockColumns(blocks) for blocks in allocation.values()]))


def over_the_wire(allocation: dict[int, list[ReceivedBlockInfo]]) -> Any:
    """As the driver gets it: msgpack-packed by the tracker, unpacked with the client's options."""
    return msgpack.unpackb(msgpack.packb(encode_allocation(allocation)), strict_map_key=False)


def test_the_driver_gets_back_exactly_the_blocks_the_tracker_allocated() -> None:
    decoded = decode_allocation(over_the_wire(ALLOCATION))
    assert decoded == ALLOCATION
    assert list(decoded) == [3, 0, 7]  # stream order kept
    # the same values the per-block decoder builds from the old map form
    assert decoded == {
        s: [ReceivedBlockInfo.from_wire(b.to_wire()) for b in blocks] for s, blocks in ALLOCATION.items()
    }
    assert decoded[3][1].offset_ranges[2] == OffsetRange("topic-0", 2, 10, 20)


def test_each_block_gets_a_metadata_map_of_its_own() -> None:
    decoded = decode_allocation(over_the_wire(ALLOCATION))
    decoded[3][0].metadata["x"] = 1
    assert decoded[3][2].metadata == {} and decoded[7][0].metadata == {}


def test_repeated_receiver_ids_and_topics_travel_once() -> None:
    many = {1: [block(1, i, ranges=2) for i in range(100)]}
    wire = encode_allocation(many)
    assert wire["receiver_ids"] == ["r0"] and wire["topics"] == ["topic-0", "topic-1"]
    assert wire["range_topics"] == bytes([0, 1] * 100) and wire["metadata"] == []
    assert len(msgpack.packb(wire)) < len(msgpack.packb({1: [b.to_wire() for b in many[1]]})) / 2


@pytest.mark.parametrize("top, width", [(0, 1), (255, 1), (256, 2), (2**16, 4), (2**32, 8), (2**63 - 1, 8)])
def test_an_integer_column_takes_the_narrowest_width_that_holds_its_largest_value(top: int, width: int) -> None:
    column = uints([top, 0, 1], top)
    assert len(column) == 3 * width
    assert int.from_bytes(column[:width], "little", signed=width == 8) == top  # little-endian on every host


def test_record_counts_and_offsets_past_32_bits_round_trip() -> None:
    ranges = (OffsetRange("t", 2**40, 2**62, 2**63 - 1),)
    big = {2: [ReceivedBlockInfo(2, "b", "r", 2**63 - 1, "file:///b.blk", ranges)]}
    assert decode_allocation(over_the_wire(big)) == big


names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8)
ranges_ = st.builds(
    lambda t, p, a, n: OffsetRange(t, p, a, a + n),
    names,
    st.integers(0, 2**31),
    st.integers(0, 2**62),
    st.integers(0, 1000),
)


@st.composite
def allocations(draw: Any) -> dict[int, list[ReceivedBlockInfo]]:
    out = {}
    for stream in draw(st.lists(st.integers(0, 2**31), unique=True, max_size=4)):
        out[stream] = [
            ReceivedBlockInfo(
                stream,
                f"{stream}-{i}-{draw(names)}",
                draw(names),
                draw(st.integers(0, 2**40)),
                draw(names),
                tuple(draw(st.lists(ranges_, max_size=3))),
                draw(st.dictionaries(names, st.integers(-(2**63), 2**63 - 1), max_size=2)),
            )
            for i in range(draw(st.integers(0, 5)))
        ]
    return out


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(allocations())
def test_any_allocation_round_trips(allocation: dict[int, list[ReceivedBlockInfo]]) -> None:
    assert decode_allocation(over_the_wire(allocation)) == allocation


def corrupt(change) -> Any:
    wire = copy.deepcopy(over_the_wire(ALLOCATION))
    change(wire)
    return wire


def _set(column: str, index: int, value: Any):
    def change(wire: dict) -> None:
        wire[column][index] = value

    return change


def _put(column: str, values: list[int], width: int):
    """Replace an integer column with ``values``, ``width`` bytes each, little-endian (signed at 8)."""

    def change(wire: dict) -> None:
        wire[column] = b"".join(v.to_bytes(width, "little", signed=width == 8) for v in values)

    return change


# entries 0-2 are stream 3's blocks, 3-4 stream 7's; ranges 0 (block 0), 1-3 (block 1), 4-5 (blocks 3, 4)
CASES = {
    "a block id that is not a string": (_set("block_ids", 4, 12), "stream 7, column block_ids, entry 4"),
    "an empty block id": (_set("block_ids", 1, ""), "stream 3, column block_ids, entry 1"),
    "a block id over 256 characters": (_set("block_ids", 0, "x" * 257), "stream 3, column block_ids, entry 0"),
    "a receiver index past the table": (
        _put("receivers", [0, 1, 0, 2, 0], 1),
        "stream 7, column receivers, entry 3: 2 is out of bounds (0 <= value < 2)",
    ),
    "a record count past 2**63 - 1": (
        _put("num_records", [10, 30, -5, 10, 10], 8),
        "stream 3, column num_records, entry 2: -5 is out of bounds (0 <= value < 2**63)",
    ),
    "an integer column that is a list": (
        lambda w: w.__setitem__("num_records", [10, 30, 0, 10, 10]),
        "column num_records: must be bytes, got list",
    ),
    "an integer column of 3 bytes an entry": (
        lambda w: w.__setitem__("num_records", bytes(15)),
        "column num_records: has 15 bytes: not 1, 2, 4 or 8 for each of its 5 entries",
    ),
    "an integer column one byte short": (
        lambda w: w.__setitem__("receivers", bytes(4)),
        "column receivers: has 4 bytes: not 1, 2, 4 or 8 for each of its 5 entries",
    ),
    "bytes in a column that describes no entry": (
        lambda w: w.update(
            ranges_per_block=bytes(5), range_topics=b"\0", partitions=b"", from_offsets=b"", until_offsets=b""
        ),
        "column range_topics: has 1 bytes, the reply describes no entry",
    ),
    "a location that is not a string": (_set("locations", 3, b"file:///x"), "stream 7, column locations, entry 3"),
    "an empty receiver id in the table": (_set("receiver_ids", 1, ""), "column receiver_ids: table entry 1"),
    "a topic that is not a string": (_set("topics", 0, 5), "column topics: table entry 0"),
    "a range ending before it starts": (
        _put("until_offsets", [10, 20, 20, 5, 10, 20], 1),
        "stream 3, column until_offsets, entry 1: range 3: until_offset 5 is below from_offset 10",
    ),
    "a topic index past the table": (
        _put("range_topics", [0, 0, 1, 0, 0, 9], 1),
        "stream 7, column range_topics, entry 4: range 5: 9 is out of bounds (0 <= value < 2)",
    ),
    "a partition past 2**63 - 1": (
        _put("partitions", [0, 0, 1, 2, -1, 0], 8),
        "stream 7, column partitions, entry 3: range 4: -1 is out of bounds",
    ),
    "a range count that does not add up": (
        _put("ranges_per_block", [1, 3, 0, 1, 2], 1),
        "column range_topics: has 6 bytes: not 1, 2, 4 or 8 for each of its 7 entries",
    ),
    "a column too short": (lambda w: w["locations"].pop(), "column locations: has 4 entries, the reply describes 5"),
    "a column missing": (lambda w: w.pop("num_records"), "column num_records: is missing"),
    "a per-range column missing": (lambda w: w.pop("from_offsets"), "column from_offsets: is missing"),
    "a column that is a map": (lambda w: w.__setitem__("block_ids", {}), "column block_ids: must be a list, got dict"),
    "a stream named twice": (_set("streams", 1, 3), "column streams names a stream twice"),
    "a negative stream id": (_set("streams", 2, -7), "column streams, entry 2: -7 is out of bounds"),
    "a stream id past 2**63 - 1": (_set("streams", 2, 2**63), "column streams, entry 2: 9223372036854775808 is out"),
    "a boolean block count": (_set("blocks_per_stream", 1, False), "column blocks_per_stream, entry 1: must be an"),
    "block counts not matching the streams": (
        lambda w: w["blocks_per_stream"].pop(),
        "column blocks_per_stream: has 2",
    ),
    "metadata that is not a map": (_set("metadata", 0, [1, [1]]), "stream 3, column metadata, entry 1: must be a map"),
    "metadata for a block that is not there": (_set("metadata", 1, [5, {}]), "column metadata: entry 1: block index 5"),
    "metadata out of order": (
        _set("metadata", 1, [0, {}]),
        "column metadata: entry 1: block index 0 must be ascending",
    ),
    "a metadata entry that is not a pair": (
        _set("metadata", 0, 1),
        "column metadata: entry 0 must be [block index, map]",
    ),
}


@pytest.mark.parametrize("change, named", CASES.values(), ids=list(CASES))
def test_a_wrong_reply_is_refused_naming_stream_column_and_entry(change, named: str) -> None:
    with pytest.raises(InvalidMessage) as err:
        decode_allocation(corrupt(change))
    assert named in str(err.value)
    assert str(err.value).startswith("allocate_blocks reply: ")


def test_a_reply_that_is_not_a_map_is_refused() -> None:
    with pytest.raises(InvalidMessage, match="allocate_blocks reply must be a map of columns, got list"):
        decode_allocation([])


class ListLog:
    """Events as the WAL stores them (their wire form), for replay."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def write(self, event: Event) -> None:
        self.events.append(msgpack.unpackb(msgpack.packb(event.to_wire()), strict_map_key=False))


def columns(c: BlockColumns) -> dict[str, list]:
    return {name: getattr(c, name) for name in BlockColumns.COLUMNS}


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 2), st.integers(0, 3), st.booleans(), st.integers(0, 2)),
        st.tuples(st.just("allocate"), st.none() | st.integers(1, 40)),
        st.tuples(st.just("commit"), st.integers(0, 2), st.integers(0, 6)),
        st.tuples(st.just("forget"), st.integers(0, 2)),
        st.tuples(st.just("snapshot")),
        st.tuples(st.just("restart")),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_the_tracker_answers_from_its_kept_columns_exactly_what_its_blocks_encode_to(steps: list[tuple]) -> None:
    """The columns the tracker keeps per queue (appended as blocks are queued, taken by allocations
    and commits, rebuilt by replays) always describe exactly the queued blocks."""
    log = ListLog()
    tracker, snapshot, time_ms, n = ReceivedBlockTracker(log), None, 0, 0
    for step in steps:
        match step:
            case ("add", stream, ranges, with_metadata, receiver):
                n += 1
                tracker.add_block(
                    ReceivedBlockInfo(
                        stream,
                        f"b{n}",
                        f"r{receiver}",
                        10 * ranges + 1,
                        f"file:///s/stream-{stream}/b{n}.blk",
                        tuple(OffsetRange(f"t{k}", k, 10 * n, 10 * n + 10) for k in range(ranges)),
                        {"n": n} if with_metadata else {},
                    )
                )
            case ("allocate", bound):
                time_ms += 1
                taken = tracker.allocate_columns(time_ms, None if bound is None else dict.fromkeys(range(3), bound))
                assert taken is not None
                reply = encode_columns(list(taken), list(taken.values()))
                assert reply == encode_allocation(tracker.get_blocks_of_batch(time_ms))
            case ("commit", stream, upto):
                tracker.commit_blocks(stream, upto * 3)
            case ("forget", stream):
                tracker.forget_stream(stream)
            case ("snapshot",):
                snapshot = msgpack.unpackb(msgpack.packb(tracker.snapshot()), strict_map_key=False)
                log.events.clear()
            case ("restart",):
                tracker = ReceivedBlockTracker(log)
                if snapshot is not None:
                    tracker.restore(snapshot)
                for event in log.events:
                    tracker.apply(event_from_wire(event))
        for stream in range(3):
            queue = tracker._queues.get(stream, StreamQueue())
            assert columns(queue.columns) == columns(BlockColumns(tracker.get_unallocated_blocks(stream)))
