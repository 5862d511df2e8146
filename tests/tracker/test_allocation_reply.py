"""The columnar allocate_blocks reply: what the tracker encodes the driver decodes to the same
blocks, and a reply that is wrong anywhere is refused with the stream, column and entry named."""

from __future__ import annotations

import copy
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.block_info import InvalidMessage, OffsetRange, ReceivedBlockInfo
from sluice.tracker.allocation_reply import decode_allocation, encode_allocation


def block(stream: int, i: int, *, ranges: int = 1, receiver: str = "r0", metadata: dict | None = None
          ) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(stream, f"b{stream}-{i}", receiver, 10 * ranges, f"file:///blocks/{stream}/b{i}.blk",
                             tuple(OffsetRange(f"topic-{k % 2}", k, 10 * i, 10 * i + 10) for k in range(ranges)),
                             metadata or {})


ALLOCATION = {
    3: [block(3, 0), block(3, 1, ranges=3, receiver="r1", metadata={"note": [1, 2]}), block(3, 2, ranges=0)],
    0: [],
    7: [block(7, 0, receiver="r1"), block(7, 1, metadata={"k": "v"})],
}


def over_the_wire(allocation: dict[int, list[ReceivedBlockInfo]]) -> Any:
    """As the driver gets it: msgpack-packed by the tracker, unpacked with the client's options."""
    return msgpack.unpackb(msgpack.packb(encode_allocation(allocation)), strict_map_key=False)


def test_the_driver_gets_back_exactly_the_blocks_the_tracker_allocated() -> None:
    decoded = decode_allocation(over_the_wire(ALLOCATION))
    assert decoded == ALLOCATION
    assert list(decoded) == [3, 0, 7]   # stream order kept
    # the same values the per-block decoder builds from the old map form
    assert decoded == {s: [ReceivedBlockInfo.from_wire(b.to_wire()) for b in blocks]
                       for s, blocks in ALLOCATION.items()}
    assert decoded[3][1].offset_ranges[2] == OffsetRange("topic-0", 2, 10, 20)


def test_each_block_gets_a_metadata_map_of_its_own() -> None:
    decoded = decode_allocation(over_the_wire(ALLOCATION))
    decoded[3][0].metadata["x"] = 1
    assert decoded[3][2].metadata == {} and decoded[7][0].metadata == {}


def test_repeated_receiver_ids_and_topics_travel_once() -> None:
    many = {1: [block(1, i, ranges=2) for i in range(100)]}
    wire = encode_allocation(many)
    assert wire["receiver_ids"] == ["r0"] and wire["topics"] == ["topic-0", "topic-1"]
    assert len(wire["ranges"]) == 4 * 200 and wire["metadata"] == []
    assert len(msgpack.packb(wire)) < len(msgpack.packb({1: [b.to_wire() for b in many[1]]})) / 2


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8)
ranges_ = st.builds(lambda t, p, a, n: OffsetRange(t, p, a, a + n), names, st.integers(0, 2**31),
                    st.integers(0, 2**62), st.integers(0, 1000))


@st.composite
def allocations(draw: Any) -> dict[int, list[ReceivedBlockInfo]]:
    out = {}
    for stream in draw(st.lists(st.integers(0, 2**31), unique=True, max_size=4)):
        out[stream] = [ReceivedBlockInfo(stream, f"{stream}-{i}-{draw(names)}", draw(names),
                                         draw(st.integers(0, 2**40)), draw(names),
                                         tuple(draw(st.lists(ranges_, max_size=3))),
                                         draw(st.dictionaries(names, st.integers(-2**63, 2**63 - 1), max_size=2)))
                       for i in range(draw(st.integers(0, 5)))]
    return out


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


# entries 0-2 are stream 3's blocks, 3-4 stream 7's
CASES = {
    "a block id that is not a string": (_set("block_ids", 4, 12), "stream 7, column block_ids, entry 4"),
    "an empty block id": (_set("block_ids", 1, ""), "stream 3, column block_ids, entry 1"),
    "a block id over 256 characters": (_set("block_ids", 0, "x" * 257), "stream 3, column block_ids, entry 0"),
    "a receiver index past the table": (_set("receivers", 3, 2),
        "stream 7, column receivers, entry 3: 2 is out of bounds"),
    "a negative receiver index": (_set("receivers", 0, -1), "stream 3, column receivers, entry 0"),
    "a negative record count": (_set("num_records", 2, -5), "stream 3, column num_records, entry 2: -5"),
    "a boolean record count": (_set("num_records", 4, True),
        "stream 7, column num_records, entry 4: must be an integer"),
    "a float record count": (_set("num_records", 0, 1.5), "stream 3, column num_records, entry 0"),
    "a location that is not a string": (_set("locations", 3, b"file:///x"), "stream 7, column locations, entry 3"),
    "an empty receiver id in the table": (_set("receiver_ids", 1, ""), "column receiver_ids: table entry 1"),
    "a topic that is not a string": (_set("topics", 0, 5), "column topics: table entry 0"),
    "a range ending before it starts": (_set("ranges", 2, 50), "stream 3, column ranges, entry 0: range 0"),
    "a topic index past the table": (_set("ranges", 4, 9), "stream 3, column ranges, entry 1: range 1"),
    "a negative partition": (_set("ranges", 4 * 4 + 1, -1), "stream 7, column ranges, entry 3: range 4"),
    "a string offset": (_set("ranges", 2, "0"), "stream 3, column ranges, entry 0: range 0"),
    "a range count that does not add up": (_set("ranges_per_block", 2, 1),
        "column ranges: has 24 entries, the reply describes 28"),
    "a negative range count": (_set("ranges_per_block", 0, -1), "stream 3, column ranges_per_block, entry 0"),
    "a column too short": (lambda w: w["locations"].pop(), "column locations: has 4 entries, the reply describes 5"),
    "a column missing": (lambda w: w.pop("num_records"), "column num_records: is missing"),
    "a column that is a map": (lambda w: w.__setitem__("block_ids", {}), "column block_ids: must be a list, got dict"),
    "a stream named twice": (_set("streams", 1, 3), "column streams names a stream twice"),
    "a negative stream id": (_set("streams", 2, -7), "column streams, entry 2: -7 is out of bounds"),
    "block counts not matching the streams": (lambda w: w["blocks_per_stream"].pop(),
        "column blocks_per_stream: has 2"),
    "metadata that is not a map": (_set("metadata", 0, [1, [1]]), "stream 3, column metadata, entry 1: must be a map"),
    "metadata for a block that is not there": (_set("metadata", 1, [5, {}]), "column metadata: entry 1: block index 5"),
    "metadata out of order": (_set("metadata", 1, [0, {}]),
        "column metadata: entry 1: block index 0 must be ascending"),
    "a metadata entry that is not a pair": (_set("metadata", 0, 1),
        "column metadata: entry 0 must be [block index, map]"),
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
