"""``sluice-driver``: run a batch function on a stream, from the command line or ``spark-submit``.

    sluice-driver --tracker 127.0.0.1:7100 --app myjob:process --batch-interval-ms 1000 \\
                  --initial-rate 5000 --master 'local[2]' --metrics-port 9102

``--app module:function`` names the function called with each :class:`~sluice.spark_driver.batch.Batch`
(the current directory is importable; a file path is refused with the module form to use, since
Spark's workers import the function by its module).  Every option is also a TOML key (``--config``)
and an environment variable (``SLUICE_DRIVER_*``, ``SLUICE_BACKPRESSURE_*``, ``SLUICE_ESTIMATOR_*``).
Every setting is checked, the estimator built once and the app imported before Spark starts.
SIGTERM and SIGINT stop gracefully, in every state, within a bound:

* running: one last batch at the next tick (bounded by the rate as usual), then the batches running
  or queued finish, all within ``driver.stop_timeout_ms`` (30 s); past it the batches still running
  are cancelled (they stay pending at the tracker and a restart re-runs them) and the process exits
  at most 2 s later, status 3;
* waiting for the tracker (not started yet): the wait ends, exit within 2 s;
* during a tracker outage: tracker calls stop waiting for the connection, so no batch is made and
  the stop takes at most one batch interval plus 2 s;
* while Spark itself starts: exit within 2 s.

A second signal exits at once (within 2 s), status 3: batches in progress are abandoned, to be
re-run after a restart.  Exit status: 0 after a graceful stop, 1 when a batch failed for good under
``on_batch_failure = "stop"`` (the message names the batch and the cause) or when the tracker
refuses the driver (a wrong auth token), 2 for bad settings, 3 after a forced stop.

Under ``spark-submit`` the master and the Spark settings come from spark-submit; run the file of
:mod:`sluice.spark_driver.submit` with the same options::

    spark-submit --master yarn "$(python -m sluice.spark_driver.submit --path)" \\
        --tracker tracker.example:7100 --app myjob:process

or call :func:`submit_main` from your own spark-submit script.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sluice.config import Config, ConfigError, parse_args, read_token
from sluice.logs import setup_logging
from sluice.metrics_web_config import load as load_web_config
from sluice.settings import DriverSettings
from sluice.spark_driver.source import SourceRefused

log = logging.getLogger("sluice.spark_driver.cli")  # not __name__: run as -m it is __main__

SECTIONS = ("driver", "backpressure", "estimator", "kafka", "block_store", "log")
EXIT_FORCED = 3  # a second signal, or a graceful stop past driver.stop_timeout_ms: batches abandoned
GRACE_S = 2.0  # what the process may take to end after its stop (Spark's own shutdown included)


def exit_now(status: int, why: str | None = None) -> None:
    """End the process at once, whatever threads are left (a job thread still in the user's function
    or a Spark call would otherwise hold the interpreter's exit).

    The batches it was running stay pending at the tracker and a restart re-runs them; Spark's JVM,
    started by PySpark, exits when its parent's end closes its standard input."""
    if why is not None:
        log.warning("%s: exiting now with status %d", why, status)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


class StopSignals:
    """SIGTERM and SIGINT for the driver: the first stops gracefully on a thread of its own (the
    main thread may be inside ``start()``, waiting for the tracker), the second exits at once.

    :param stop_timeout_s: the graceful stop's budget (``driver.stop_timeout_ms``); a watchdog
        exits the process :data:`GRACE_S` after it, whatever is still running.
    """

    def __init__(self, stop_timeout_s: float) -> None:
        self.stop_timeout_s = stop_timeout_s
        self.driver: Any = None  # set once built: before, a signal exits at once
        self.requested = threading.Event()
        self._count = 0

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.on_signal)

    def on_signal(self, signum: int, _frame: Any) -> None:
        self._count += 1
        name = signal.Signals(signum).name
        if self._count > 1:
            exit_now(EXIT_FORCED, f"{name} again: batches in progress are abandoned (a restart re-runs them)")
        if self.driver is None:
            exit_now(0, f"{name} while Spark starts")
        log.info("%s: stopping gracefully within %.0f s (a second signal stops at once)", name, self.stop_timeout_s)
        self.requested.set()
        started = self.driver.state not in ("initialized", "starting")  # else no batch to wait for
        threading.Thread(target=self._stop, name="sluice-stop", daemon=True).start()
        if started:
            overrun = (self.stop_timeout_s + GRACE_S, EXIT_FORCED, f"the stop took over {self.stop_timeout_s:.0f} s")
        else:
            overrun = (GRACE_S, 0, "Spark still stopping")
        watchdog = threading.Timer(overrun[0], exit_now, overrun[1:])
        watchdog.daemon = True
        watchdog.start()

    def _stop(self) -> None:
        try:
            self.driver.stop(graceful=True, timeout=self.stop_timeout_s)
        except Exception:  # the main thread sees the driver stopped in any case
            log.exception("the graceful stop failed")


def load_app(spec: str) -> Callable[[Any], Any]:
    """``module:function`` → the function; errors name what is wrong."""
    module_name, sep, attr = spec.partition(":")
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        path = Path(module_name)
        raise ConfigError(
            f"driver.app = {spec!r} names a file: pass the module form --app {path.stem}:{attr or 'function'} "
            f"and run from {path.parent or '.'} (or put it on PYTHONPATH)"
        )
    if not sep or not module_name or not attr:
        raise ConfigError(f"driver.app = {spec!r} is not allowed: expected module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"driver.app = {spec!r}: module {module_name} cannot be imported: {exc}") from None
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ConfigError(f"driver.app = {spec!r}: {module_name} has no attribute {attr}")
    if not callable(fn):
        raise ConfigError(f"driver.app = {spec!r}: {attr} is not callable")
    return fn


def estimator_options(config: Config) -> dict[str, Any]:
    """The PID gains from ``estimator.pid.*``, or ``estimator.options`` for other estimators,
    checked by building the estimator once: a bad option is a :class:`ConfigError` before Spark
    starts, not a traceback after."""
    # the driver's parts load only to run it: --help and the configuration checks import none of them
    from sluice.estimators import PluginError, config_options, create

    section = config.section("estimator")
    options = config_options(section["name"], section)
    if config["backpressure.enabled"]:
        try:
            create(section["name"], config["driver.batch_interval_ms"], options)
        except (ValueError, PluginError) as exc:
            where = "estimator.pid.*" if section["name"] == "pid" else "estimator.options"
            raise ConfigError(f"{where} is not allowed: {exc}") from None
    return options


def build_source(config: Config, auth_token: str | None) -> Any:
    """The batch source ``driver.source`` names."""
    if config["driver.source"] == "direct-kafka":
        # each source loads only when it is chosen: direct mode needs nothing of the tracker
        from sluice.spark_driver.direct import DirectKafkaSource

        factory = getattr(DirectKafkaSource, "from_config", None)
        if factory is not None:
            return factory(config)
        return DirectKafkaSource(**config.section("kafka"))
    # each source loads only when it is chosen: the receiver source needs nothing of Kafka
    from sluice.spark_driver.receiver_source import ReceiverSource
    from sluice.tracker.wire.tls import client_context

    source = ReceiverSource(
        config["driver.tracker"],
        auth_token=auth_token,
        block_store=config["driver.block_store"],
        block_store_options=config["block_store.options"],
        ssl=client_context("driver", config["driver.tls_ca"], config["driver.tls_cert"], config["driver.tls_key"]),
        on_refused=config["driver.on_batch_failure"],
        bad_records=config["driver.bad_records"],
        dead_letter=config["driver.dead_letter"],
        max_partitions=config["driver.max_batch_partitions"],
        min_partitions=config["driver.min_batch_partitions"],
    )
    log.info("blocks are read and deleted only inside %s", source.block_store)
    return source


def build_driver(config: Config, spark: Any = None, fn: Callable[[Any], Any] | None = None) -> Any:
    """A StreamingDriver configured from ``config`` (the app function loaded unless given)."""
    # the driver's parts load only to run it: --help and the configuration checks import none of them
    from sluice.spark_driver.driver import StreamingDriver

    if fn is None:
        if not config["driver.app"]:
            raise ConfigError("driver.app is not set: pass --app module:function")
        fn = load_app(config["driver.app"])
    token = read_token(config["driver.auth_token_file"])
    settings, estimator = DriverSettings.from_config(config), estimator_options(config)  # checked first
    source, options = build_source(config, token), {s: config.section(s) for s in SECTIONS}
    preflight = getattr(source, "preflight", None)
    if preflight is not None:  # before Spark starts: brokers that refuse us cost no JVM start
        preflight(options, config["driver.batch_interval_ms"])
    driver = StreamingDriver(
        spark,
        tracker=config["driver.tracker"],
        settings=settings,
        estimator_options=estimator,
        source=source,
        options=options,
        app_name="sluice-driver",
    )
    driver.foreach_batch(fn)
    return driver


def run(config: Config, spark: Any = None) -> int:
    """Start, wait for a signal or the end of a finite trigger, stop; the exit status."""
    # the driver's parts load only to run it: --help and the configuration checks import none of them
    from sluice.spark_driver import metrics
    from sluice.spark_driver.job_scheduler import BatchFailedError
    from sluice.spark_driver.ui import parse_names, serve_driver

    web = load_web_config(config["driver.metrics_web_config"], "driver.metrics_web_config")  # before Spark starts
    signals = StopSignals(config["driver.stop_timeout_ms"] / 1000)
    on_main_thread = threading.current_thread() is threading.main_thread()
    if on_main_thread:
        signals.install()  # before Spark starts: a signal while it starts exits at once
    driver = build_driver(config, spark)
    metrics.serve(config["driver.metrics_port"], config["driver.metrics_addr"], web)
    names = parse_names(config["driver.ui_allowed_hosts"])
    page = serve_driver(driver, config["driver.ui_host"], config["driver.ui_port"], names)
    if page is not None:
        print(f"sluice-driver: streaming page at {page.url}", file=sys.stderr, flush=True)
    signals.driver = driver
    if on_main_thread:
        signals.install()  # again: PySpark's SparkContext took SIGINT for itself
    try:
        driver.start()
    except Exception:
        if not signals.requested.is_set():
            raise  # else the stop closed the source under start()
    try:
        while not driver.await_termination(0.2):
            pass
    except BatchFailedError as exc:
        print(f"sluice-driver: {exc}", file=sys.stderr)
        return 1
    status = EXIT_FORCED if driver.abandoned_batches else 0
    if signals.requested.is_set():
        exit_now(status)  # stopped: nothing a batch left behind may delay the exit
    return status


def main(argv: Sequence[str] | None = None, *, spark: Any = None) -> int:
    """The ``sluice-driver`` console script."""
    config, _args = parse_args(
        "sluice-driver", "Run a batch function on a Sluice stream (PySpark driver).", SECTIONS, "driver", argv
    )
    setup_logging(config["log.level"])
    try:
        return run(config, spark)
    except ConfigError as exc:
        print(f"sluice-driver: {exc}", file=sys.stderr)
        return 2
    except SourceRefused as exc:  # the authorizer's word does not change by trying again
        print(f"sluice-driver: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the tracker refused us (auth token), a file cannot be read...
        print(f"sluice-driver: {exc}", file=sys.stderr)
        return 1


def submit_main(argv: Sequence[str] | None = None) -> int:
    """Entry for ``spark-submit``: the SparkSession (master, resources) comes from spark-submit."""
    # pyspark loads only under spark-submit, which made the session
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("sluice-driver").getOrCreate()
    try:
        return main(argv, spark=spark)
    finally:
        spark.stop()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
