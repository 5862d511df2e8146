"""The services' console scripts run from a working directory with relative paths everywhere.

A user who writes ``wal_dir = "wal"``, ``block_store = "file://./blocks"``, ``checkpoint_dir =
"ckpt"``, ``auth_token_file = "token"`` and ``--config sluice.toml`` gets what they mean: paths
relative to where the service was started.  The receiver-mode run also puts the auth token files
of the receivers and the driver to use (and a wrong token is refused in one line); the direct-mode
run shows the minimum-rate floor through ``sluice-driver --source direct-kafka`` and its config.
"""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from sluice.embedded import create_topic, free_port, stop_process, wait_for_port, wait_until
from sluice.spark_driver.direct.checkpoint import FILE_NAME

pytestmark = [pytest.mark.slow, pytest.mark.spark]

BIN = Path(sys.executable).parent


def service(cwd: Path, name: str, *args: str) -> subprocess.Popen:
    """A console script started in ``cwd`` (its own process group, output in ``cwd/<name>.log``)."""
    script = BIN / name
    assert script.exists(), f"{script} is missing (`make install` installs the console scripts)"
    log = open(cwd / f"{name}{len(list(cwd.glob(name + '*.log')))}.log", "ab")
    return subprocess.Popen([str(script), *args], cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def run_to_end(cwd: Path, name: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run a console script to its end; on timeout its whole process group goes (Spark's JVM too)."""
    proc = subprocess.Popen(
        [str(BIN / name), *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{name} {' '.join(args)} did not end within {timeout}s:\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def accepted(address: str, token: str) -> int:
    from sluice.tracker.client.sync_client import SyncTrackerClient

    with SyncTrackerClient(address, "admin", auth_token=token) as client:
        return sum(s["unallocated_records"] + 0 for s in client.status()["streams"].values())


APP = """
def process(batch):
    batch.write_json("out")          # relative: the driver's working directory
"""


def test_receiver_mode_with_relative_paths_and_token_files(spark, tmp_path: Path) -> None:
    cwd = tmp_path / "run"
    cwd.mkdir()
    port = free_port()
    address = f"127.0.0.1:{port}"
    (cwd / "token").write_text("s3cret-token\n")
    (cwd / "wrong-token").write_text("not-the-token\n")
    (cwd / "app.py").write_text(APP)
    (cwd / "sluice.toml").write_text(f'''
[tracker]
listen = "{address}"
wal_dir = "wal"
auth_token_file = "token"
block_store = "file://./blocks"

[receiver]
tracker = "{address}"
source = "generator"
block_store = "file://./blocks"
auth_token_file = "token"
receiver_id = "g"

[generator]
rate = 3000.0
total = 6000

[driver]
tracker = "{address}"
app = "app:process"
master = "local[1]"
batch_interval_ms = 500
trigger = "available-now"
auth_token_file = "token"
block_store = "file://./blocks"
''')
    tracker = service(cwd, "sluice-tracker", "--config", "sluice.toml")
    procs = [tracker]
    try:
        wait_for_port(port, proc=tracker)
        procs.append(service(cwd, "sluice-receiver", "--config", "sluice.toml"))
        procs.append(
            service(
                cwd,
                "sluice-receiver",
                "--config",
                "sluice.toml",
                "--block-store",
                "file://blocks",
                "--receiver-id",
                "h",
            )
        )
        refused = run_to_end(
            cwd,
            "sluice-receiver",
            "--config",
            "sluice.toml",
            "--auth-token-file",
            "wrong-token",
            "--receiver-id",
            "x",
            timeout=60,
        )
        assert refused.returncode == 1 and refused.stderr.strip().splitlines() == [
            f"sluice-receiver: tracker {address} refused hello: hello refused: role receiver needs its credential "
            "(token or client certificate); got a wrong auth token"
        ], refused.stderr
        wait_until(lambda: accepted(address, "s3cret-token") == 12_000, "12,000 records accepted", 60, procs)
        driver = run_to_end(cwd, "sluice-driver", "--config", "sluice.toml")
        assert driver.returncode == 0, driver.stderr[-3000:]
        wrong = run_to_end(cwd, "sluice-driver", "--config", "sluice.toml", "--auth-token-file", "wrong-token")
        assert wrong.returncode == 1, wrong.stderr[-3000:]
        assert (
            f"sluice-driver: tracker {address} refused hello: hello refused: role driver needs its credential "
            "(token or client certificate); got a wrong auth token" in wrong.stderr.splitlines()
        ), wrong.stderr[-3000:]
        assert "Spark" not in wrong.stderr, wrong.stderr[-3000:]  # refused before Spark started
    finally:
        for proc in reversed(procs):
            stop_process(proc)
    assert (cwd / "wal").is_dir() and any((cwd / "wal").glob("log-*"))
    # file://./blocks and file://blocks are one directory of the working directory, the tracker's and the driver's too
    assert {path.name.split("-")[2] for path in (cwd / "blocks" / "stream-0").glob("*.blk")} == {"g", "h"}
    values = [r.value for r in spark.read.schema("value string").json(str(cwd / "out")).collect()]
    tags = Counter(value.split(" ", 1)[0] for value in values)
    assert len(values) == 12_000 and set(tags.values()) == {1}  # every record once
    assert {tag.split(":")[0] for tag in tags} == {"g-0", "h-0"}


FLOOR_APP = """
from pathlib import Path

def record(batch):
    sizes = Path("sizes")            # relative: the driver's working directory
    sizes.mkdir(exist_ok=True)
    (sizes / str(batch.time_ms)).write_text(repr(sorted((r.partition, r.count) for r in batch.offset_ranges)))
"""


@pytest.mark.kafka
def test_direct_mode_floor_through_the_cli_and_a_relative_checkpoint_dir(kafka_broker, tmp_path: Path) -> None:
    from tests.direct.conftest import produce

    cwd = tmp_path / "run"
    cwd.mkdir()
    partitions, per_partition = 4, 100
    topic = asyncio.run(create_topic(kafka_broker.bootstrap, partitions))
    produce(kafka_broker.bootstrap, topic, {p: per_partition for p in range(partitions)})
    (cwd / "app.py").write_text(FLOOR_APP)
    # The rate is 4 records/s for 4 partitions, 0.5 s batches: 0.5 record per partition per batch.
    # The floor is ceil(50/s x 0.5 s) = 25 (Spark would floor at 50, forgetting the seconds).
    (cwd / "sluice.toml").write_text(f'''
[kafka]
bootstrap_servers = "{kafka_broker.bootstrap}"
topic = "{topic}"
group_id = "g-{topic}"
min_rate_per_partition = 50.0

[backpressure]
initial_rate = 4.0

[estimator]
name = "constant"

[estimator.options]
rate = 4.0

[driver]
source = "direct-kafka"
app = "app:record"
master = "local[1]"
batch_interval_ms = 500
trigger = "available-now"
checkpoint_dir = "ckpt"
''')
    driver = run_to_end(cwd, "sluice-driver", "--config", "sluice.toml")
    assert driver.returncode == 0, driver.stderr[-3000:]
    assert (cwd / "ckpt" / FILE_NAME).is_file()
    marks = sorted((cwd / "sizes").iterdir(), key=lambda path: int(path.name))
    batches = [ast.literal_eval(path.read_text()) for path in marks]
    with_records = [dict(b) for b in batches if any(count for _, count in b)]
    assert with_records == [{p: 25 for p in range(partitions)}] * (per_partition // 25), batches
