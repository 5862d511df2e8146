"""``sluice-receiver`` worker processes against the real broker and a real ``sluice-tracker``."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.embedded import create_topic, receiver_argv, start_service, stop_process, wait_until
from sluice.tracker.client.tracker_client import TrackerClient
from tests.polling import eventually

from .helpers import allocate_all, duplicates, records_of, scrape
from .test_kafka_receiver import committed, produce


def worker(tmp_path: Path, tracker: str, name: str, *args: str) -> subprocess.Popen:
    return start_service(
        receiver_argv(
            tracker,
            source=None,  # the caller's args name it
            block_store=(tmp_path / "blocks").as_uri(),
            receiver_id=name,
            extra=["--restart-delay-ms", "200", "--heartbeat-interval-ms", "500", *args],
        ),
        log=tmp_path / f"{name}.log",
    )


async def accepted_records(address: str) -> int:
    async with TrackerClient(address, "admin") as admin:
        status = await admin.status()
    return sum(s["unallocated_records"] for s in status["streams"].values())


@pytest.mark.slow
@pytest.mark.kafka
async def test_two_workers_one_killed_and_restarted_every_record_in_exactly_one_block(
    kafka_broker, tracker_process, tmp_path
):
    total, partitions = 100_000, 4
    topic = await create_topic(kafka_broker.bootstrap, partitions)
    await produce(kafka_broker.bootstrap, topic, total, partitions)
    group = f"g-{topic}"
    config = tmp_path / "sluice.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_broker.bootstrap}"\ntopic = "{topic}"\n'
        f'group_id = "{group}"\n[kafka.client]\nsession_timeout_ms = 6000\n'
        "heartbeat_interval_ms = 1000\n"
    )
    common = ("--config", str(config), "--source", "kafka", "--max-rate", "6000", "--block-interval-ms", "100")
    a = worker(tmp_path, tracker_process.address, "wa", *common)
    b = worker(tmp_path, tracker_process.address, "wb", *common)
    procs = [a, b]
    try:
        await eventually(
            lambda: accepted_records(tracker_process.address),
            timeout=60,
            interval=0.2,
            message="first records accepted",
        )
        await eventually(
            lambda: _at_least(tracker_process.address, total // 4),
            timeout=60,
            interval=0.2,
            message="a quarter of the records accepted",
        )
        dup_before = duplicate_blocks(tracker_process.metrics_port)
        # Kill `a` between the tracker adding a block and `a` committing its offsets: with the
        # tracker paused, `a` sends the add_block of its next block and waits for the ack; killed
        # there, that block reaches the tracker on SIGCONT with its offsets never committed.
        tracker_process.pause()
        await asyncio.sleep(1.0)  # `a` cuts a block every 100 ms and sends its add_block
        a.send_signal(signal.SIGKILL)  # mid-stream: blocks queued, offsets uncommitted
        a.wait(10)
        tracker_process.resume()
        a2 = worker(tmp_path, tracker_process.address, "wa", *common)  # same id: a new incarnation
        procs.append(a2)
        await eventually(
            lambda: _at_least(tracker_process.address, total), timeout=180, interval=0.5, message="all records accepted"
        )
        assert await accepted_records(tracker_process.address) == total
        assert stop_process(a2) == 0 and stop_process(b) == 0  # SIGTERM: graceful, exit 0
    finally:
        for proc in procs:
            stop_process(proc, signal.SIGKILL)
    # the records of the block the tracker added for the dead `a` were read again by a2 (or b)
    # and dropped or trimmed: a re-read really happened, and still every record is there once
    reread = duplicate_blocks(tracker_process.metrics_port)
    assert reread["dropped"] + reread["trimmed"] > dup_before["dropped"] + dup_before["trimmed"], reread
    records = records_of(await allocate_all(tracker_process.address))
    assert not duplicates([(r.partition, r.offset) for r in records])
    assert sorted(int(r.value) for r in records) == list(range(total))
    ends = await committed(kafka_broker.bootstrap, group, topic, partitions)
    assert ends == {p: total // partitions for p in range(partitions)}


async def _at_least(address: str, count: int) -> bool:
    return await accepted_records(address) >= count


def duplicate_blocks(metrics_port: int, stream: str = "0") -> dict[str, float]:
    """The tracker's counts of re-read blocks it dropped whole or trimmed."""
    return {
        action: scrape(metrics_port, "sluice_tracker_duplicate_blocks_total", {"stream": stream, "action": action})
        or 0.0
        for action in ("dropped", "trimmed")
    }


@pytest.mark.slow
async def test_sigterm_pushes_the_last_block_and_exits_zero(tracker_process, tmp_path):
    proc = worker(
        tmp_path,
        tracker_process.address,
        "wg",
        "--source",
        "generator",
        "--generator-rate",
        "2000",
        "--block-interval-ms",
        "1000",
        "--receivers",
        "2",
    )
    try:
        await eventually(lambda: accepted_records(tracker_process.address), timeout=30, interval=0.2)
    finally:
        code = stop_process(proc)
    assert code == 0, (tmp_path / "wg.log").read_text()
    records = records_of(await allocate_all(tracker_process.address))
    for rid in ("wg-0", "wg-1"):
        seqs = [int(r.split(" ")[0].split(":")[1]) for r in records if r.startswith(rid + ":")]
        assert seqs == list(range(len(seqs))) and seqs  # nothing lost at the end, in order


@pytest.mark.slow
async def test_second_sigterm_exits_at_once_when_the_tracker_never_acknowledges(tracker_process, tmp_path):
    proc = worker(tmp_path, tracker_process.address, "wf", "--source", "generator", "--generator-rate", "2000")
    try:
        await eventually(lambda: accepted_records(tracker_process.address), timeout=30, interval=0.2)
        tracker_process.pause()  # no acknowledgement will come for the last block
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.5)  # the graceful stop waits for the tracker, as it must
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 3, (tmp_path / "wf.log").read_text()
        assert "second stop signal" in (tmp_path / "wf.log").read_text()
    finally:
        tracker_process.resume()
        stop_process(proc, signal.SIGKILL)


@pytest.mark.slow
def test_a_block_store_the_tracker_refuses_stops_the_worker_at_registration_exit_2_naming_both(
    tracker_process, tmp_path
):
    """Before, each block was refused and the receiver retried for ever, a warning every 5 s."""
    elsewhere = (tmp_path / "other-blocks").as_uri()
    proc = worker(tmp_path, tracker_process.address, "wb", "--source", "generator", "--block-store", elsewhere)
    try:
        assert proc.wait(timeout=30) == 2
    finally:
        stop_process(proc)
    lines = (tmp_path / "wb.log").read_text().splitlines()
    ours = (tmp_path / "blocks").as_uri()
    naming = [line for line in lines if elsewhere in line and ours in line]
    assert len(naming) == 1 and "ERROR" in naming[0], "\n".join(lines[-20:])
    assert not (tmp_path / "other-blocks").exists() or not any((tmp_path / "other-blocks").rglob("*.blk"))


@pytest.mark.slow
def test_bad_flag_value_stops_with_one_line_naming_the_key():
    out = subprocess.run(
        [sys.executable, *receiver_argv(None, source=None, block_interval_ms=0)], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "receiver.block_interval_ms = '0'" in out.stderr and "above 0" in out.stderr


@pytest.mark.slow
async def test_unreachable_tracker_does_not_crash_the_worker(tmp_path):
    from sluice.embedded import free_port

    log = tmp_path / "wx.log"
    proc = worker(tmp_path, f"127.0.0.1:{free_port()}", "wx", "--source", "generator", "--log-level", "DEBUG")
    try:
        # alive through several refused connections (a crash fails the wait at once)
        wait_until(lambda: log.read_text().count("not reachable") >= 3, "three connection retries", 60, [proc], log)
    finally:
        assert stop_process(proc) == 0


@pytest.mark.slow
async def test_metrics_port_serves_the_receiver_metrics(tracker_process, tmp_path):
    import urllib.request

    from sluice.embedded import free_port

    port = free_port()
    proc = worker(
        tmp_path,
        tracker_process.address,
        "wm",
        "--source",
        "generator",
        "--generator-rate",
        "1000",
        "--max-rate",
        "500",
        "--metrics-port",
        str(port),
    )
    try:
        await eventually(lambda: accepted_records(tracker_process.address), timeout=30, interval=0.2)
        text = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        )
    finally:
        assert stop_process(proc) == 0
    labels = 'receiver="wm-0",stream="0"'
    for name in (
        "sluice_receiver_records_total",
        "sluice_receiver_rate_limit",
        "sluice_receiver_block_queue_depth",
        "sluice_receiver_blocks_pushed_total",
        "sluice_receiver_push_seconds_bucket",
        "sluice_receiver_limiter_wait_seconds_total",
    ):
        assert name in text and labels in text.split(name, 1)[1].split("\n", 1)[0] or name + "{" in text, name
    assert f"sluice_receiver_rate_limit{{{labels}}} 500.0" in text


def test_the_initial_rate_comes_from_the_shared_toml_the_environment_or_a_flag(tmp_path):
    from sluice.config import parse_args, resolve
    from sluice.receiver.cli import SECTIONS
    from sluice.settings import ReceiverSettings

    def initial_rate(config):
        return ReceiverSettings.from_config(config).initial_rate

    shared = tmp_path / "sluice.toml"
    shared.write_text("[backpressure]\ninitial_rate = 700.0\n")
    assert initial_rate(resolve(SECTIONS, config_file=str(shared), environ={})) == 700.0
    assert initial_rate(resolve(SECTIONS, environ={"SLUICE_BACKPRESSURE_INITIAL_RATE": "5000"})) == 5000.0
    for flag in ("--initial-rate", "--backpressure-initial-rate"):
        config, _ = parse_args("sluice-receiver", "", SECTIONS, "receiver", [flag, "250"])
        assert initial_rate(config) == 250.0
    assert initial_rate(resolve(SECTIONS, environ={})) is None  # 0: none
    off = {"SLUICE_BACKPRESSURE_INITIAL_RATE": "5000", "SLUICE_BACKPRESSURE_ENABLED": "false"}
    assert initial_rate(resolve(SECTIONS, environ=off)) is None  # as for the driver: no backpressure, no bound
