"""The fast path added to ReceivedBlockInfo.from_wire accepts exactly what the general path accepts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice import block_info
from sluice.block_info import InvalidMessage, ReceivedBlockInfo

_anything = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=4),
                      st.lists(st.integers(0, 3), max_size=4), st.dictionaries(st.text(max_size=2), st.integers()))
_ranges = st.lists(st.one_of(
    st.tuples(st.text(max_size=3), st.integers(-1, 3), st.integers(-1, 20), st.integers(-1, 20)).map(list),
    _anything), max_size=3)


@st.composite
def wires(draw: Any) -> Any:
    wire: dict = {"stream_id": draw(st.one_of(st.integers(-1, 3), _anything)),
                  "block_id": draw(st.one_of(st.text(max_size=5), st.text(min_size=257, max_size=258), _anything)),
                  "receiver_id": draw(st.one_of(st.text(max_size=5), _anything)),
                  "num_records": draw(st.one_of(st.integers(-1, 9), _anything)),
                  "location": draw(st.one_of(st.text(max_size=5), _anything)),
                  "offset_ranges": draw(_ranges),
                  "metadata": draw(st.one_of(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                                             _anything))}
    for key in draw(st.lists(st.sampled_from(sorted(wire)), max_size=2)):
        wire.pop(key, None)
    return wire


def decode(wire: Any, fast: bool) -> Any:
    saved = block_info._from_wire_fast
    if not fast:
        block_info._from_wire_fast = lambda w: None
    try:
        return ReceivedBlockInfo.from_wire(wire)
    except (InvalidMessage, TypeError, ValueError) as exc:
        return type(exc)
    finally:
        block_info._from_wire_fast = saved


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(wire=wires())
def test_fast_and_general_paths_agree(wire: Any) -> None:
    assert decode(wire, fast=True) == decode(wire, fast=False)
