"""ReceivedBlockInfo.from_wire: one decoder that accepts exactly the valid maps and names the bad field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.block_info import MAX_ID_LENGTH, InvalidMessage, OffsetRange, ReceivedBlockInfo

_anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.lists(st.integers(0, 3), max_size=4),
    st.dictionaries(st.text(max_size=2), st.integers()),
)


def _mostly(good: Any, bad: Any = _anything) -> Any:
    """A field that is usually well-formed, so that whole maps are valid often enough to test acceptance."""
    return st.sampled_from(range(6)).flatmap(lambda i: bad if i == 5 else good)


_good_range = st.builds(
    lambda t, p, lo, n: [t, p, lo, lo + n],
    st.text(min_size=1, max_size=3),
    st.integers(0, 3),
    st.integers(0, 20),
    st.integers(0, 5),
)
_bad_range = st.one_of(
    st.tuples(st.text(max_size=3), st.integers(-1, 3), st.integers(-1, 20), st.integers(-1, 20)).map(list), _anything
)
_negative = st.integers(-3, -1)


@st.composite
def wires(draw: Any) -> Any:
    wire: dict = {
        "stream_id": draw(_mostly(st.integers(0, 3), st.one_of(_negative, _anything))),
        "block_id": draw(
            _mostly(st.text(min_size=1, max_size=5), st.one_of(st.text(min_size=256, max_size=257), _anything))
        ),
        "receiver_id": draw(_mostly(st.text(min_size=1, max_size=5))),
        "num_records": draw(_mostly(st.integers(0, 9), st.one_of(_negative, _anything))),
        "location": draw(
            _mostly(st.text(min_size=1, max_size=5), st.one_of(st.text(min_size=4096, max_size=4097), _anything))
        ),
        "offset_ranges": draw(_mostly(st.lists(_mostly(_good_range, _bad_range), max_size=3))),
        "metadata": draw(_mostly(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))),
    }
    for key in draw(st.lists(st.sampled_from(sorted(wire)), max_size=1)):
        wire.pop(key, None)
    return wire


FIELDS = ("stream_id", "block_id", "receiver_id", "num_records", "location", "offset_ranges", "metadata")


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _string(v: Any, limit: int) -> bool:
    return isinstance(v, str) and 0 < len(v) <= limit


def _range_ok(r: Any) -> bool:
    return (
        isinstance(r, (list, tuple))
        and len(r) == 4
        and _string(r[0], MAX_ID_LENGTH)
        and all(_int(x) for x in r[1:])
        and r[1] >= 0
        and 0 <= r[2] <= r[3]
    )


def valid(w: dict) -> bool:
    """The rules, stated independently of the decoder."""
    return (
        all(k in w for k in FIELDS[:5])
        and _int(w["stream_id"])
        and w["stream_id"] >= 0
        and _string(w["block_id"], MAX_ID_LENGTH)
        and _string(w["receiver_id"], MAX_ID_LENGTH * 16)
        and _int(w["num_records"])
        and w["num_records"] >= 0
        and _string(w["location"], MAX_ID_LENGTH * 16)
        and isinstance(w.get("offset_ranges", []), (list, tuple))
        and isinstance(w.get("metadata", {}), dict)
        and all(_range_ok(r) for r in w.get("offset_ranges", []))
    )


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(wire=wires())
def test_accepts_exactly_the_valid_maps_and_names_what_is_wrong(wire: Any) -> None:
    try:
        info = ReceivedBlockInfo.from_wire(wire)
    except InvalidMessage as exc:
        assert not valid(wire), wire
        assert any(name in str(exc) for name in FIELDS) or "offset range" in str(exc), str(exc)
    else:
        assert valid(wire), wire
        assert ReceivedBlockInfo.from_wire(info.to_wire()) == info


@pytest.mark.parametrize(
    "change, message",
    [
        ({"stream_id": None}, r"block.stream_id must be an integer, got NoneType"),
        ({"stream_id": True}, r"block.stream_id must be an integer, got a boolean"),
        ({"block_id": "x" * 257}, r"block.block_id is longer than 256 characters"),
        ({"receiver_id": 7}, r"block.receiver_id must be a string, got int"),
        ({"location": "x" * 5000}, r"block.location is longer than 4096 characters"),
        ({"offset_ranges": "t,0,0,1"}, r"block.offset_ranges must be a list, got str"),
        (
            {"offset_ranges": [["t", 0, 0, 1], ["t", "0", 0, 1]]},
            r"block.offset_ranges\[1\].partition must be an integer",
        ),
        ({"offset_ranges": [["", 0, 0, 1]]}, r"block.offset_ranges\[0\].topic must be a non-empty string"),
        ({"metadata": []}, r"block.metadata must be a map, got list"),
    ],
)
def test_a_bad_field_is_named(change: dict, message: str) -> None:
    wire = {**ReceivedBlockInfo(0, "b", "r", 1, "file:///b", (OffsetRange("t", 0, 0, 1),)).to_wire(), **change}
    with pytest.raises(InvalidMessage, match=message):
        ReceivedBlockInfo.from_wire(wire)
    missing = dict(wire)
    del missing["num_records"]
    with pytest.raises(InvalidMessage, match=r"block.num_records is missing"):
        ReceivedBlockInfo.from_wire(missing)
