"""The log's store on a real S3 API (moto's server): conditional writes and fencing over HTTP."""

from __future__ import annotations

import pytest

from sluice.testing import MotoServer
from sluice.tracker.log.events import BlockAdded
from sluice.tracker.log.object_log import ObjectLog
from sluice.tracker.log.protocol import Deposed, Writer, log_seqs
from sluice.tracker.log.store import LogStoreError, ObjectTooLarge, PreconditionFailed, S3Objects, open_store
from sluice.tracker.server.service import TrackerService
from tests.tracker.conftest import make_block


@pytest.fixture
def store(s3: MotoServer, monkeypatch: pytest.MonkeyPatch) -> S3Objects:
    for name, value in s3.env.items():  # botocore's own chain, AWS_ENDPOINT_URL included
        monkeypatch.setenv(name, value)
    opened = open_store(f"s3://{s3.bucket()}/tracker/log")
    assert isinstance(opened, S3Objects)
    return opened


@pytest.mark.slow
def test_put_if_absent_and_if_match_are_honoured(store: S3Objects) -> None:
    store.put_if_absent("k", b"1")
    with pytest.raises(PreconditionFailed):
        store.put_if_absent("k", b"2")
    etag = store.put_if_match("lease", b"a", None)
    with pytest.raises(PreconditionFailed):
        store.put_if_match("lease", b"b", None)
    store.put_if_match("lease", b"b", etag)
    with pytest.raises(PreconditionFailed):
        store.put_if_match("lease", b"c", etag)
    assert store.get("k") == (b"1", store.get("k")[1])
    assert store.keys("") == ["k", "lease"] and store.get("missing") is None


@pytest.mark.slow
def test_a_second_tracker_fences_the_first_on_s3(store: S3Objects) -> None:
    a = ObjectLog(store, Writer("a", "a:7100"))
    a.recover()
    a.write(BlockAdded(make_block("b0")))
    b = ObjectLog(store, Writer("b", "b:7100"))
    recovered = b.recover()
    service = TrackerService()
    service.recover(recovered.snapshot, recovered.events)
    assert [x.block_id for x in service.tracker.get_unallocated_blocks(0)] == ["b0"]
    with pytest.raises(Deposed, match="b:7100"):
        a.write(BlockAdded(make_block("b1")))
    assert log_seqs(store) == [0, 1, 2]


def test_a_log_url_of_another_scheme_is_refused_naming_what_is_allowed() -> None:
    with pytest.raises(LogStoreError, match=r"s3://bucket/prefix or file:///path"):
        open_store("gs://bucket/log")
    with pytest.raises(LogStoreError, match="needs a bucket"):
        open_store("s3:///log")


@pytest.mark.slow
def test_an_object_larger_than_allowed_is_refused_before_its_body_is_read(store: S3Objects) -> None:
    store.put("big", b"x" * 2048)
    with pytest.raises(ObjectTooLarge, match="2048 bytes") as err:
        store.get("big", limit=1024)
    got = store.get("big")
    assert got is not None and err.value.etag == got[1]
