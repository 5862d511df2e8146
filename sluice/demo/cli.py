"""``sluice-demo``: the whole pipeline on loopback, a load step, and what backpressure did about it.

Order of events: check Java and the ports (one line each if wrong; a taken default port is replaced
by a free one, named in one line), start the broker (unless ``--bootstrap-servers``), create the
topic, start the tracker and two receiver workers, start the PySpark word-count driver in this
process, then the load generator. While the load runs, each batch prints a table row, and each
change of the offered load a line. When the profile ends, the demo waits until every record the
broker acknowledged has been processed (``--drain-seconds`` at most), stops the driver gracefully,
stops every child process group, prints the summary and writes the chart. Ctrl-C or SIGTERM at any
time goes straight to the same clean-up.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from sluice.config import ConfigError, add_arguments, key, resolve
from sluice.demo import pipeline
from sluice.demo.app import BatchResult, process_batch, warm_up
from sluice.demo.processes import Children, DemoError, check_java
from sluice.demo.profile import Profile, ProfileError, parse
from sluice.demo.report import BatchRow, LiveTable, Series, format_summary, summarize, write_outputs
from sluice.embedded import ProcessError
from sluice.logs import setup_logging
from sluice.settings import DriverSettings
from sluice.storage.block_store import file_store_url

_ESTIMATOR = DriverSettings().estimator  # the schema's default (estimator.name)

PROG = "sluice-demo"
LOG_SECTIONS = ("log",)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Sluice's backpressure demo on loopback: broker, tracker, "
        "two receiver workers, a PySpark word count with a rate estimator, and a load step.",
    )
    p.add_argument("--seconds", type=float, default=60.0, help="length of the load profile (default 60)")
    p.add_argument("--profile", default="step", help="step (default), constant, spike, ramp, or RATE@SECONDS,...")
    p.add_argument(
        "--base-rate",
        type=float,
        default=1000.0,
        help="records/s the named profiles scale (step: 0.5x, 3x, 0.5x; default 1000)",
    )
    p.add_argument(
        "--cost-us",
        type=float,
        default=1000.0,
        help="fixed cost per record in the word count, microseconds (sets the capacity; default 1000)",
    )
    p.add_argument(
        "--estimator",
        default=_ESTIMATOR,
        help=f"rate estimator, built-in or plugin (default {_ESTIMATOR}; pid: Spark's PIDRateEstimator)",
    )
    p.add_argument(
        "--estimator-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an estimator option, e.g. min_rate=50 (repeatable)",
    )
    p.add_argument(
        "--initial-rate", type=float, default=None, help="rate before the first estimate (default: --base-rate)"
    )
    p.add_argument("--batch-interval-ms", type=int, default=1000)
    p.add_argument("--bootstrap-servers", default=None, help="a real Kafka cluster instead of the embedded broker")
    p.add_argument("--topic", default=None, help="topic to use (default sluice-demo, with a run id on a real cluster)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--receivers", type=int, default=2)
    p.add_argument(
        "--tracker-port",
        type=int,
        default=None,
        help=f"tracker RPC port (default {pipeline.TRACKER_PORT}, or a free port when that one is taken; "
        "0: any free port)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help=f"metrics base port: tracker +0, driver +2, receiver i +10+i (default {pipeline.METRICS_PORT}, "
        "each replaced by a free port when taken; 0: any free ports)",
    )
    p.add_argument("--master", default="local[2]", help="Spark master URL (default local[2])")
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=60.0,
        help="after the profile, wait at most this long for the backlog to be processed",
    )
    p.add_argument("--output", type=Path, default=Path("sluice-demo-out"), help="chart, summary and logs go here")
    add_arguments(p, LOG_SECTIONS, home=PROG, config_file=False)  # --log-level, as every service has
    return p


def _options(pairs: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise DemoError(f"--estimator-option {pair!r} is not allowed: expected KEY=VALUE")
        try:
            options[key] = float(value)
        except ValueError:
            options[key] = value
    return options


class _Stop(BaseException):
    """Raised in the main thread by SIGINT/SIGTERM; carries the exit status."""

    def __init__(self, status: int) -> None:
        self.status = status


class Demo:
    """One run: the children, the in-process driver, and what was recorded."""

    def __init__(self, args: argparse.Namespace, profile: Profile, ports: pipeline.Ports) -> None:
        self.args, self.profile, self.ports = args, profile, ports
        self.run_dir = args.output / "run"
        self.block_dir = self.run_dir / "blocks"  # the one store of the receivers, the tracker and the driver
        self.children = Children(args.output / "logs", env={key("log.level").env: args.log_level})
        self.series = Series(args.batch_interval_ms, step=profile.step_window())
        self.table = LiveTable(sys.stdout, profile.steps())
        self.lock = threading.Lock()
        self.results: dict[int, tuple[BatchResult, float | None]] = {}
        self.seen: set[int] = set()
        self.duplicates = self.bad = 0
        self.t0 = time.time() + 3600.0  # set when the load starts; rows before it are not shown
        self.driver: Any = None
        self.spark: Any = None
        self.store: Any = None  # the streaming page's store: the rate decisions for the chart
        self.page: Any = None

    # -- the driver's callbacks (Spark job threads) ------------------------------------------------

    def on_batch(self, batch: Any) -> None:
        rate = self.driver.rate_loop.current_rate(0) if self.driver is not None else None
        result = process_batch(batch, self.args.cost_us)
        with self.lock:
            for seq in result.seqs:
                if seq in self.seen:
                    self.duplicates += 1
                else:
                    self.seen.add(seq)
            self.bad += result.bad
            self.results[batch.time_ms] = (result, rate)

    def on_batch_completed(self, info: Any) -> None:
        with self.lock:
            result, rate = self.results.pop(info.batch_time_ms, (BatchResult(), None))
        t = info.batch_time_ms / 1000.0 - self.t0
        if t < 0 and result.records == 0:
            return  # before the load started: nothing to show
        row = BatchRow(
            round(t, 2),
            info.batch_time_ms,
            result.records,
            rate,
            info.processing_delay_ms or 0,
            info.scheduling_delay_ms or 0,
            result.top(3),
            self.profile.offered_between(t - self.args.batch_interval_ms / 1000, t),
        )
        self.series.batches.append(row)
        self.table.add(row)

    # -- the run -----------------------------------------------------------------------------------

    def run(self) -> int:
        args = self.args
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(parents=True)
        run_id = uuid.uuid4().hex[:8]
        bootstrap = args.bootstrap_servers or pipeline.start_broker(self.children, self.run_dir / "kafka")
        topic = args.topic or ("sluice-demo" if args.bootstrap_servers is None else f"sluice-demo-{run_id}")
        pipeline.create_topic(bootstrap, topic, args.partitions)
        tracker = pipeline.start_tracker(self.children, self.ports, self.run_dir / "wal", self.block_dir)
        pipeline.start_receivers(
            self.children, self.ports, tracker, bootstrap, topic, f"sluice-demo-{run_id}", self.block_dir
        )
        try:
            self.start_driver(tracker)
        except Exception as exc:  # noqa: BLE001 - a bad estimator option, Spark failing to start: one line
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise DemoError(f"the driver cannot start: {first}") from None
        print(f"{PROG}: broker {bootstrap}, topic {topic}, tracker {tracker}, estimator {args.estimator}")
        print(f"{PROG}: metrics " + ", ".join(f"{k} {v}" for k, v in self.ports.metrics_urls().items()))
        self.t0 = time.time()
        progress = pipeline.start_load(self.children, bootstrap, topic, args.profile, args.seconds, args.base_rate)
        while not progress.done.wait(0.2):
            self.check_driver()
        self.series.offered = progress.samples
        print(f"{PROG}: load finished, {progress.acked} records acknowledged by the broker; draining the backlog")
        drained = self.wait_drained(progress.acked)
        self.driver.stop(graceful=True, timeout=max(30.0, 10 * args.batch_interval_ms / 1000))
        self.series.rate_limit = self.rate_limits()
        self.children.stop_all()
        with self.lock:
            summary = summarize(self.series, progress.acked, self.seen, self.duplicates, drained)
        print(format_summary(summary))
        chart = write_outputs(self.series, summary, args.output)
        print(f"{PROG}: chart {chart}, summary {args.output / 'summary.json'}, logs {args.output / 'logs'}")
        return 0 if summary.none_lost and self.bad == 0 and progress.failed == 0 else 1

    def start_driver(self, tracker: str) -> None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # all on loopback; also quiets a warning
        from pyspark.sql import SparkSession

        from sluice.spark_driver import StreamingDriver, metrics

        self.spark = (
            SparkSession.builder.master(self.args.master)
            .appName(PROG)
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        self.spark.sparkContext.setLogLevel("ERROR")
        warm_up(self.spark.sparkContext)
        metrics.serve(self.ports.driver_metrics, addr="127.0.0.1")
        initial = self.args.initial_rate if self.args.initial_rate is not None else self.args.base_rate
        self.driver = StreamingDriver(
            self.spark,
            tracker=tracker,
            batch_interval_ms=self.args.batch_interval_ms,
            estimator=self.args.estimator,
            estimator_options=_options(self.args.estimator_option),
            initial_rate=initial,
            app_name=PROG,
            block_store=file_store_url(self.block_dir),
        )
        self.driver.foreach_batch(self.on_batch)
        self.serve_page()  # the page's store first: a batch is on the page before its row is printed
        self.driver.add_listener(self)
        self.driver.start()

    def serve_page(self) -> None:
        """The driver's streaming page on ``driver.ui_port`` (``SLUICE_DRIVER_UI_PORT`` moves it, 0
        turns it off); the default port, when taken, is replaced by a free one, as the others are."""
        # the streaming page loads only when the demo serves it
        from sluice.spark_driver.ui import UIServeError, UIServer, attach, parse_names

        settings = resolve(("driver",), home="driver")
        host, port = settings["driver.ui_host"], settings["driver.ui_port"]
        names = parse_names(settings["driver.ui_allowed_hosts"])
        self.store = attach(self.driver)
        if port == 0:
            return
        try:
            self.page = UIServer(self.store, host, port, allowed_hosts=names)
        except UIServeError as exc:
            if key("driver.ui_port").env in os.environ:
                raise DemoError(str(exc)) from None
            self.page = UIServer(self.store, host, 0, allowed_hosts=names)
            print(f"{PROG}: port {port} (streaming page) is in use; using {self.page.port} instead", flush=True)
        print(f"{PROG}: streaming page {self.page.url}", flush=True)

    def check_driver(self) -> None:
        if self.driver.state == "stopped":
            try:
                self.driver.await_termination(0)
            except Exception as exc:  # noqa: BLE001 - said in one line, then the clean-up runs
                raise DemoError(f"the driver stopped: {exc}") from None
            raise DemoError("the driver stopped unexpectedly")

    def rate_limits(self) -> list[tuple[float, float]]:
        """The published rate over time, for the chart: the initial rate, then each decision the
        streaming page's store noted (the receivers' limit follows it)."""
        initial = self.args.initial_rate if self.args.initial_rate is not None else self.args.base_rate
        points = [(0.0, float(initial))] + [(d.time_ms / 1000 - self.t0, d.rate) for d in self.store.decisions()]
        return [(max(0.0, t), rate) for t, rate in points]

    def wait_drained(self, acked: int) -> bool:
        deadline = time.monotonic() + self.args.drain_seconds
        while time.monotonic() < deadline:
            self.check_driver()
            with self.lock:
                if len(self.seen) >= acked:
                    return True
            time.sleep(0.2)
        return False

    def shutdown(self) -> None:
        """Stop whatever is still running: the page, the driver (not gracefully), then every child group."""
        if self.page is not None:
            self.page.close()
        if self.driver is not None and self.driver.state not in ("stopped",):
            try:
                self.driver.stop(graceful=False, timeout=10)
            except Exception:  # noqa: BLE001 - clean-up goes on
                pass
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception:  # noqa: BLE001
                pass
        self.children.stop_all(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Children and Spark tasks resolve paths from their own working directories, and block
    # locations are file:// URLs: everything below works on the absolute output directory.
    args.output = args.output.absolute()
    try:
        args.log_level = resolve(LOG_SECTIONS, vars(args), home=PROG)["log.level"]
    except ConfigError as exc:
        parser.exit(2, f"{PROG}: {exc}\n")
    setup_logging(args.log_level)  # the driver runs in this process; the children get the same level
    try:
        profile = parse(args.profile, args.seconds, args.base_rate)
        _options(args.estimator_option)
        # the estimators load for a run, not for --help or a bad argument
        from sluice import estimators

        if args.estimator not in estimators.available():
            raise DemoError(
                f"estimator {args.estimator!r} is not allowed: expected one of "
                f"{', '.join(sorted(estimators.available()))}"
            )
    except (ProfileError, DemoError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        check_java()
        ports, notes = pipeline.Ports.choose(args.tracker_port, args.metrics_port, args.receivers)
    except (DemoError, ProcessError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    for note in notes:
        print(f"{PROG}: {note}", flush=True)

    def interrupt(signum: int, _frame: Any) -> None:
        raise _Stop(128 + signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    demo = Demo(args, profile, ports)
    status = 1
    try:
        status = demo.run()
    except _Stop as stop:
        print(f"\n{PROG}: interrupted; stopping everything it started", file=sys.stderr)
        status = stop.status
    except (DemoError, ProcessError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
    finally:
        for sig in previous:  # a second Ctrl-C must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        demo.shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status


if __name__ == "__main__":
    sys.exit(main())
