"""The tracker and the driver started from their command lines always hold to a block store: unset,
the receivers' default, ``./sluice-blocks`` of their working directory, so a location naming another
deployment's blocks is refused, never read or deleted."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sluice.block_info import ReceivedBlockInfo
from sluice.config import ConfigError, resolve
from sluice.embedded import free_port, start_service, stop_process, tracker_argv
from sluice.spark_driver.block_rdd import read_block_records
from sluice.spark_driver.cli import SECTIONS, build_source
from sluice.storage.block_store import Block, FileBlockStore, LocationRefused
from tests.tracker.conftest import RawPeer


def _add_block(peer: RawPeer, incarnation: int, n: int, store: Path) -> dict:
    bid = f"input-0-r0-{incarnation}-{n}"
    wire = ReceivedBlockInfo(0, bid, "r0", 1, (store / "stream-0" / f"{bid}.blk").as_uri()).to_wire()
    peer.send({"op": "add_block", "id": n, "block": wire})
    reply = peer.recv()
    assert reply is not None
    return reply


@pytest.mark.slow
def test_a_tracker_without_a_block_store_takes_blocks_only_under_its_own_sluice_blocks(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    port, log = free_port(), tmp_path / "tracker.log"
    args = tracker_argv(f"127.0.0.1:{port}", "wal", extra=["--no-fsync"])
    proc = start_service(args, port=port, log=log, cwd=run)
    peer = RawPeer(port)
    try:
        assert "ok" in peer.hello()
        peer.send({"op": "register_receiver", "id": 0, "stream_id": 0, "receiver_id": "r0", "host": "h"})
        incarnation = peer.recv()["ok"]["incarnation"]
        root = (run / "sluice-blocks").as_uri()
        refused = _add_block(peer, incarnation, 1, tmp_path / "elsewhere" / "sluice-blocks")
        assert refused["error"]["code"] == "invalid", refused
        assert f"is refused: it is not inside the block store {root}" in refused["error"]["message"]
        assert _add_block(peer, incarnation, 2, run / "sluice-blocks")["ok"]["accepted"]
    finally:
        peer.close()
        stop_process(proc)
    assert f"block locations only inside {root})" in log.read_text()


def test_the_tracker_and_the_driver_refuse_an_empty_block_store() -> None:
    for key in ("tracker.block_store", "driver.block_store"):
        with pytest.raises(ConfigError, match=f"{key} = '' .* is not allowed"):
            resolve(("tracker", *SECTIONS), {key: ""})
    with pytest.raises(ConfigError, match="tracker.block_store = 'file:///a, ftp://h/b'"):
        resolve(("tracker",), {"tracker.block_store": "file:///a, ftp://h/b"})


def test_a_driver_without_a_block_store_reads_and_deletes_only_under_its_own_sluice_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.chdir(run)
    with caplog.at_level(logging.INFO, "sluice.spark_driver.cli"):
        source = build_source(resolve(SECTIONS, {"driver.tracker": "127.0.0.1:1"}), None)
    root = (run / "sluice-blocks").as_uri()
    assert source.block_store == root
    assert f"blocks are read and deleted only inside {root}" in caplog.text
    other = FileBlockStore(tmp_path / "elsewhere" / "sluice-blocks")
    outside = other.write(Block(0, "victim", ["precious"]))
    with pytest.raises(LocationRefused, match=f"{outside}' is refused: it is not inside the block store {root}"):
        read_block_records((source.block_store, outside, (), "victim"))
    assert source._delete_blocks([ReceivedBlockInfo(0, "victim", "r0", 1, outside)]) is True  # refused for good
    assert other.read(outside).records == ["precious"]
    own = FileBlockStore(run / "sluice-blocks").write(Block(0, "mine", ["x"]))
    assert list(read_block_records((source.block_store, own, (), "mine"))) == ["x"]
    assert source._delete_blocks([ReceivedBlockInfo(0, "mine", "r0", 1, own)]) is True
    assert not (run / "sluice-blocks" / "stream-0" / "mine.blk").exists()
