"""The ``sluice`` source's tracker connection honours ``authTokenFile`` and ``tlsCaFile`` against a
real tracker process serving TLS with an auth token (no Spark needed: the reader's own ``connect``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.embedded import start_tracker, stop_process
from sluice.embedded.certs import self_signed
from sluice.spark_driver.structured.options import OptionError, sluice_options
from sluice.spark_driver.structured.source import connect
from sluice.tracker.client.tracker_client import TrackerAuthError, TrackerUnavailable
from tests.deploy.test_tls import make_pki

pytestmark = [pytest.mark.slow]


def test_auth_token_and_tls_options_reach_the_tracker(tmp_path: Path) -> None:
    pair = self_signed(tmp_path, common_name="localhost", hosts=("127.0.0.1",))
    cert, key, token = pair.cert, pair.key, tmp_path / "token"
    token.write_text("s3cret\n")
    tracker = start_tracker(
        tmp_path / "wal",
        args=["--no-fsync", "--auth-token-file", str(token), "--tls-cert", str(cert), "--tls-key", str(key)],
    )
    base = {"tracker": tracker.address, "requestTimeoutMs": "3000"}
    try:
        client = connect(sluice_options({**base, "authTokenFile": str(token), "tlsCaFile": str(cert)}))
        try:
            assert client.list_blocks(0, 0, 0).next_seq == 0
        finally:
            client.close()
        wrong = tmp_path / "wrong"
        wrong.write_text("guess")
        with pytest.raises(TrackerAuthError, match="refused hello"):
            connect(sluice_options({**base, "authTokenFile": str(wrong), "tlsCaFile": str(cert)}))
        with pytest.raises(TrackerUnavailable):  # no TLS: the hello never gets an answer
            connect(sluice_options({**base, "authTokenFile": str(token)}))
        with pytest.raises(OptionError, match="option authTokenFile"):
            connect(sluice_options({**base, "authTokenFile": str(tmp_path / "missing")}))
    finally:
        stop_process(tracker.proc)


def test_offsets_the_tracker_cannot_serve_fail_with_the_reason(tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from sluice.spark_driver.structured.source import OffsetError, SluiceStreamReader
    from sluice.storage.block_store import FileBlockStore
    from sluice.tracker.client.sync_client import SyncTrackerClient
    from tests.structured.conftest import put_block

    tracker = start_tracker(tmp_path / "wal", args=["--no-fsync"], block_store=(tmp_path / "blocks").as_uri())
    reader = SluiceStreamReader(sluice_options({"tracker": tracker.address, "records": "value"}))
    try:
        with SyncTrackerClient(tracker.address, "receiver") as client:
            for i in range(3):
                put_block(client, FileBlockStore(tmp_path / "blocks"), [i])
        assert reader.initialOffset() == {"0": 0}
        assert reader.latestOffset({"0": 0}, ReadMaxRows(2)) == {"0": 2}
        assert reader.latestOffset({"0": 1}, ReadAllAvailable()) == {"0": 3}
        reader.prepareForTriggerAvailableNow()
        with SyncTrackerClient(tracker.address, "receiver") as client:
            put_block(client, FileBlockStore(tmp_path / "blocks"), [3])  # after availableNow's start
        assert reader.latestOffset({"0": 1}, ReadAllAvailable()) == {"0": 3}
        assert reader.latestOffset({"0": 1}, ReadMaxRows(5)) == {"0": 3}
        assert len(reader.partitions({"0": 0}, {"0": 2})) == 2
        with pytest.raises(OffsetError, match="past every block the tracker .* ever numbered"):
            reader.latestOffset({"0": 9}, ReadMaxRows(2))  # a checkpoint from another tracker
        reader.commit({"0": 2})
        with pytest.raises(OffsetError, match="blocks 0 to 1 are no longer queued"):
            reader.partitions({"0": 0}, {"0": 2})  # consumed elsewhere
        with pytest.raises(OffsetError, match="no position for stream"):
            reader.latestOffset({"7": 0}, ReadMaxRows(2))
    finally:
        reader.stop()
        stop_process(tracker.proc)


def test_a_client_certificate_reaches_a_tracker_that_requires_one(tmp_path: Path) -> None:
    """tlsCertFile/tlsKeyFile: the driver certificate's role is taken; without one the tracker refuses."""
    pki = make_pki(tmp_path)
    tracker = start_tracker(
        tmp_path / "wal",
        args=[
            "--no-fsync",
            "--tls-cert",
            str(pki["tracker"]),
            "--tls-key",
            str(pki["tracker.key"]),
            "--tls-client-ca",
            str(pki["ca"]),
        ],
    )
    base = {"tracker": tracker.address, "requestTimeoutMs": "3000", "tlsCaFile": str(pki["ca"])}
    try:
        client = connect(
            sluice_options({**base, "tlsCertFile": str(pki["driver"]), "tlsKeyFile": str(pki["driver.key"])})
        )
        try:
            assert client.list_blocks(0, 0, 0).next_seq == 0
        finally:
            client.close()
        with pytest.raises((TrackerUnavailable, TrackerAuthError)):  # no certificate: refused
            connect(sluice_options(base))
        with pytest.raises(OptionError, match="tlsCertFile and tlsKeyFile must be given together"):
            sluice_options({**base, "tlsCertFile": str(pki["driver"])})
    finally:
        stop_process(tracker.proc)


class KilledAfterTheTrackerCommitted(Exception):
    """Stands for a SIGKILL landing right after the tracker accepted ``commit_blocks``."""


def test_a_kill_between_the_tracker_commit_and_the_deletes_leaves_no_orphan_block(tracker, tmp_path: Path) -> None:
    """A query process killed inside ``commit(end)`` must not leave files the tracker no longer
    knows (nothing would ever delete them).  The kill is a fault a real process cannot be made to
    hit at that instruction, so a client wrapper raises right after the tracker's real commit."""
    from sluice.spark_driver.structured.source import SluiceStreamReader
    from sluice.storage.block_store import FileBlockStore
    from sluice.tracker.client.sync_client import SyncTrackerClient
    from tests.structured.conftest import put_block

    store = FileBlockStore(tmp_path / "blocks")
    with SyncTrackerClient(tracker.address, "receiver") as client:
        blocks = [put_block(client, store, [i]) for i in range(4)]
    reader = SluiceStreamReader(sluice_options({"tracker": tracker.address, "records": "value"}))
    real = reader._tracker()

    class KilledClient:
        def __getattr__(self, name: str):
            return getattr(real, name)

        def commit_blocks(self, stream_id: int, until_seq: int):
            real.commit_blocks(stream_id, until_seq)
            raise KilledAfterTheTrackerCommitted

    reader._client = KilledClient()
    try:
        with pytest.raises(KilledAfterTheTrackerCommitted):
            reader.commit({"0": 2})
        queued = {info.block_id for _, info in real.list_blocks(0, 0).blocks}
    finally:
        reader._client = real
        reader.stop()
    on_disk = {info.block_id for info in blocks if Path(info.location.removeprefix("file://")).exists()}
    assert queued == {b.block_id for b in blocks[2:]}
    assert on_disk <= queued, f"orphan block files: {sorted(on_disk - queued)}"
    assert on_disk == queued


def test_a_failed_delete_leaves_the_blocks_queued_for_the_next_commit(tracker, tmp_path: Path) -> None:
    """The store fails every delete (its stream directory replaced by a file: a real error, not a
    mock): ``commit`` tells the tracker nothing, and a later commit deletes and drops them."""
    from sluice.spark_driver.structured.source import SluiceStreamReader
    from sluice.storage.block_store import FileBlockStore
    from sluice.tracker.client.sync_client import SyncTrackerClient
    from tests.structured.conftest import put_block

    store = FileBlockStore(tmp_path / "blocks")
    with SyncTrackerClient(tracker.address, "receiver") as client:
        blocks = [put_block(client, store, [i]) for i in range(3)]
    reader = SluiceStreamReader(sluice_options({"tracker": tracker.address, "records": "value"}))
    stream_dir, aside = tmp_path / "blocks" / "stream-0", tmp_path / "aside"
    try:
        stream_dir.rename(aside)
        stream_dir.write_text("not a directory")
        reader.commit({"0": 2})
        assert [info.block_id for _, info in reader._tracker().list_blocks(0, 0).blocks] == [b.block_id for b in blocks]
        stream_dir.unlink()
        aside.rename(stream_dir)
        reader.commit({"0": 2})
        assert [info.block_id for _, info in reader._tracker().list_blocks(0, 0).blocks] == [blocks[2].block_id]
    finally:
        reader.stop()
    assert [b.block_id for b in blocks if Path(b.location.removeprefix("file://")).exists()] == [blocks[2].block_id]
