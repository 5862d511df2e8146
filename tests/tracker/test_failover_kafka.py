"""The whole pipeline on real processes through a failover and a broker restart: moto's S3, tansu
storing its topics in that S3, a leader and a standby tracker on a shared log there, two Kafka
receivers writing blocks there, and the driver. The leader's host is lost mid-run (SIGKILL, its
working directory deleted), then the broker restarts mid-run on its storage; every one of 50,000
records comes out exactly once."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from sluice.testing import MotoServer, start_broker, start_tracker, stop_process, wait_until
from tests.driver.test_end_to_end import produce
from tests.storage.test_s3_end_to_end import Collector, kafka_value, start_receiver

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

TOTAL = 50_000


def test_host_loss_then_a_broker_restart_mid_run_lose_and_duplicate_nothing(
    spark, s3: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.spark_driver import StreamingDriver

    for name, value in s3.env.items():  # the driver's tasks read the blocks through the same chain
        monkeypatch.setenv(name, value)
    env = {**s3.env, "AWS_ENDPOINT": s3.endpoint, "AWS_ALLOW_HTTP": "true"}  # tansu's object_store reads these
    storage = f"s3://{s3.bucket()}/"
    broker = start_broker(storage=storage, env=env, log=tmp_path / "broker.log")
    log_url, blocks = f"s3://{s3.bucket()}/tracker", f"s3://{s3.bucket()}/blocks"
    work = tmp_path / "leader-host"
    work.mkdir()
    leader = start_tracker(log_url, log=work / "tracker.log", env=s3.env, args=["--block-store", blocks])
    standby = start_tracker(
        log_url, log=tmp_path / "standby.log", env=s3.env, args=["--standby", "--block-store", blocks]
    )
    trackers = f"{leader.address},{standby.address}"
    collector = Collector(TOTAL, kafka_value)
    driver = StreamingDriver(spark, tracker=trackers, batch_interval_ms=1000, initial_rate=20_000)
    receivers = []
    try:
        topic = broker.create_topic(4)
        produce(broker.bootstrap, topic, TOTAL)
        driver.foreach_batch(collector).start()
        receivers = [
            start_receiver(
                tmp_path,
                trackers,
                blocks,
                f"k{i}",
                s3.env,
                "--source",
                "kafka",
                "--bootstrap-servers",
                broker.bootstrap,
                "--topic",
                topic,
                "--group-id",
                f"g-{topic}",
                "--max-rate",
                "1000",
            )
            for i in range(2)
        ]
        wait_until(lambda: len(collector.values) >= 4_000, "the first records processed", 120, receivers)
        leader.stop(signal.SIGKILL)
        for path in work.iterdir():
            path.unlink()
        work.rmdir()  # the leader's host and everything on it are gone
        wait_until(lambda: len(collector.values) >= 20_000, "records after the failover", 120, receivers)
        broker.stop()
        broker = start_broker(storage=storage, env=env, log=tmp_path / "broker.log", port=broker.port)
        wait_until(collector.done.is_set, "every record processed after the broker restart", 180, receivers)
    finally:
        driver.stop(graceful=False)
        for proc in receivers:
            stop_process(proc)
        leader.stop()
        standby.stop()
        broker.stop()
    counts = Counter(collector.values)
    assert sorted(map(int, counts)) == list(range(TOTAL)), f"{TOTAL - len(counts)} records missing"
    assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v > 1}
    assert "took over" in standby.log.read_text()
