"""read_committed on fetched bytes (no broker): the batches a Java consumer would leave out of a
fetch whose response lists aborted transactions, and what it keeps."""

from __future__ import annotations

import pytest

from sluice.kafka.batch_errors import BatchFormatError
from sluice.kafka.record_batches import decode_batches
from sluice.kafka.transactions import committed
from sluice.testing.record_batches import batch, marker, record, transactional

P, Q = 7, 9  # producer ids


def values(data: bytes | memoryview) -> list[bytes]:
    return [r.value for r in decode_batches(data, "t", 0, 0, 1 << 30)]


def test_an_aborted_transaction_is_left_out_and_a_committed_one_kept() -> None:
    data = b"".join(
        [
            batch(0, [record(0, b"plain")]),
            transactional(1, P, [b"p-aborted-1", b"p-aborted-2"]),
            transactional(3, Q, [b"q-committed"]),
            marker(4, P, abort=True),
            marker(5, Q, abort=False),
        ]
    )
    assert values(committed(data, [(P, 1)])) == [b"plain", b"q-committed"]
    assert values(committed(data, [])) == [b"plain", b"p-aborted-1", b"p-aborted-2", b"q-committed"]


def test_the_abort_marker_ends_the_producers_aborted_transaction() -> None:
    data = b"".join(
        [
            transactional(0, P, [b"first"]),
            marker(1, P, abort=True),
            transactional(2, P, [b"second"]),  # the producer's next transaction, committed
            marker(3, P, abort=False),
        ]
    )
    assert values(committed(data, [(P, 0)])) == [b"second"]


def test_a_transaction_listed_after_a_batch_does_not_abort_that_batch() -> None:
    data = transactional(0, P, [b"committed"]) + marker(1, P, abort=False) + transactional(2, P, [b"aborted"])
    assert values(committed(data, [(P, 2)])) == [b"committed"]


def test_batches_of_other_producers_and_without_one_are_kept_and_control_batches_stay() -> None:
    data = transactional(0, Q, [b"q"]) + batch(1, [record(0, b"plain")]) + marker(2, Q, abort=False)
    kept = committed(data, [(P, 0)])
    assert bytes(kept) == data  # nothing left out: the same bytes, markers included
    assert values(kept) == [b"q", b"plain"]


def test_a_truncated_last_batch_is_left_out_as_a_fetch_cuts_it() -> None:
    whole = transactional(0, P, [b"aborted"]) + batch(1, [record(0, b"plain")])
    cut = whole + batch(2, [record(0, b"cut")])[:20]
    assert values(committed(cut, [(P, 0)])) == [b"plain"]
    assert bytes(committed(cut, [])) == whole


def test_a_control_batch_without_a_record_is_refused() -> None:
    empty = batch(0, [], producer_id=P, attributes=0x30)
    with pytest.raises(BatchFormatError, match="control batch at offset 0 holds no control record"):
        committed(empty, [(P, 0)])
