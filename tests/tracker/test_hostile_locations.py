"""The hostile-client suite, block locations: a block's location is a path or URL a peer wrote, so
the driver and the store refuse any outside the block store (traversal, symlinks, devices, files
past the size cap) before reading or deleting it, and leave a refused block out of its batch only
when told to skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice.block_columns import BlockColumns
from sluice.block_info import ReceivedBlockInfo
from sluice.spark_driver import metrics as driver_metrics
from sluice.spark_driver.block_rdd import read_block_records
from sluice.spark_driver.receiver_source import ReceiverSource
from sluice.storage.block_store import Block, FileBlockStore, LocationRefused, check_location


def test_1_the_driver_never_deletes_or_reads_outside_its_store(tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path / "store")
    outside = tmp_path / "outside" / "stream-0" / "victim.blk"
    outside.parent.mkdir(parents=True)
    outside.write_bytes(b"precious")
    info = ReceivedBlockInfo(0, "victim", "r0", 1, outside.as_uri())
    source = ReceiverSource("127.0.0.1:1", block_store=store.url)
    assert source._delete_blocks([info]) is True  # refused for good: not a delete to try again
    assert outside.read_bytes() == b"precious"
    directory = tmp_path / "store" / "stream-0" / "dir.blk"  # the block's shape, but no file
    directory.mkdir(parents=True)
    assert source._delete_blocks([ReceivedBlockInfo(0, "dir", "r0", 1, directory.as_uri())]) is True
    assert directory.is_dir()
    with pytest.raises(LocationRefused):
        store.delete(outside.as_uri())
    with pytest.raises(LocationRefused):
        store.read(outside.as_uri())
    assert outside.exists()


def test_1_a_symlink_or_a_device_in_the_store_is_refused_when_read_and_skipped_under_skip(tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path / "store")
    real = store.write(Block(0, "real", ["a"]))
    link = tmp_path / "store" / "stream-0" / "link.blk"
    os.symlink("/dev/zero", link)
    with pytest.raises(LocationRefused, match="symbolic link"):
        store.read(link.as_uri())
    assert store.read(real).records == ["a"]
    (tmp_path / "store" / "stream-1").symlink_to("/dev")  # a stream directory leading out of the store
    with pytest.raises(LocationRefused, match="leads outside"):
        store.read(f"{store.url}/stream-1/zero.blk")
    ref = (store.url, link.as_uri(), (), "link")
    assert list(read_block_records(ref, skip_refused=True)) == []
    with pytest.raises(LocationRefused):
        read_block_records(ref)
    delete_before = os.readlink(link)
    with pytest.raises(LocationRefused, match="not a regular file"):
        store.delete(link.as_uri())
    assert os.readlink(link) == delete_before


def test_1_a_refused_block_is_left_out_of_its_batch_under_skip_only(tmp_path: Path) -> None:
    store = FileBlockStore(tmp_path / "store")
    good = ReceivedBlockInfo(0, "good", "r0", 1, store.write(Block(0, "good", ["a"])))
    bad = ReceivedBlockInfo(0, "bad", "r0", 1, "file:///etc/stream-0/bad.blk")
    skip = ReceiverSource("127.0.0.1:1", block_store=store.url, on_refused="skip")

    def refused() -> float:  # the driver counts it, on the driver's own registry
        return driver_metrics.REGISTRY.get_sample_value("sluice_blocks_refused_total", {"action": "read"}) or 0.0

    before = refused()
    assert skip._contained(1000, BlockColumns([bad, good])) == [good]
    assert refused() - before == 1
    stop = ReceiverSource("127.0.0.1:1", block_store=store.url, on_refused="stop")
    assert stop._contained(1000, BlockColumns([bad, good])) == [bad, good]  # its task refuses it: the batch fails


# --- shape, without a store -----------------------------------------------------------------


@pytest.mark.parametrize(
    "location",
    [
        "file:///dev/zero",
        "file:///etc/passwd",
        "file://host/x/stream-0/b.blk",
        "file://./rel/stream-0/b.blk",
        "file:///a/../b/stream-0/b.blk",
        "file:///a/stream-0/b.blk?x=1",
        "file:///a/stream-0/c.blk",
        "s3:///stream-0/b",
    ],
)
def test_1_locations_must_have_a_blocks_shape_even_without_a_configured_store(location: str) -> None:
    with pytest.raises(LocationRefused):
        check_location(location, 0, "b")


def test_1_a_blocks_location_in_any_store_passes_without_a_configured_store() -> None:
    for location in ("file:///var/blocks/stream-0/b.blk", "s3://bucket/prefix/stream-0/b.blk"):
        assert check_location(location, 0, "b") == location


def test_1_a_block_file_over_the_size_cap_is_refused_unread(tmp_path: Path) -> None:
    from sluice.storage.block_store import MAX_BLOCK_BYTES

    store = FileBlockStore(tmp_path / "store")
    huge = tmp_path / "store" / "stream-0" / "huge.blk"
    huge.parent.mkdir(parents=True)
    with huge.open("wb") as fh:  # sparse: no disk used
        fh.truncate(MAX_BLOCK_BYTES + 1)
    with pytest.raises(LocationRefused, match="not a regular file of at most"):
        store.read(huge.as_uri())
