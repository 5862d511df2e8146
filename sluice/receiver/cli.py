"""``sluice-receiver``: run receiver workers that feed a stream through the tracker.

SIGTERM (or SIGINT) stops gracefully: every receiver stops storing, its last block is pushed and
acknowledged, its Kafka offsets are committed, and the process exits 0.  The stop takes at most
``receiver.stop_timeout_ms`` (30 s) whatever the tracker does (gone, paused, refusing): past it the
unacknowledged blocks are abandoned (logged with their count; their offsets stay uncommitted, so
they are read again) and the process exits 3, as it does at once on a second signal.  While it
still waits for the tracker (nothing registered, nothing stored) a stop takes at most 2 s, exit 0.
A tracker it cannot reach is logged at WARNING once, then at most every 30 s, and the recovery in
one line (:class:`sluice.retry_log.RetryLog`).

A receiver that fetched record batches it cannot read stops (the log names topic, partition and
offset; ``sluice_receiver_errors_total{kind="unreadable_batch"}`` counts it) and, once every
receiver has ended, the process exits 2 like a configuration error: fetching again would bring the
same bytes, so a supervisor must not restart it (the systemd units say ``RestartPreventExitStatus=2``).
A receiver that Kafka's authorizer refuses (no ``READ`` on its group or topic, no ``DESCRIBE`` on
the topic) stops the same way, exit 2, with one line naming the resource and the operation: only
a new ACL helps.  So does one whose block store the tracker refuses at registration (it is not the
tracker's ``tracker.block_store``, so every block would be refused): one line names both stores.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence

from sluice.config import Config, ConfigError, parse_args
from sluice.kafka.authorization import KafkaAuthorizationError
from sluice.kafka.record_batches import BatchFormatError
from sluice.logs import setup_logging
from sluice.metrics_web_config import load as load_web_config
from sluice.plugins import PluginError
from sluice.receiver.metrics import serve
from sluice.receiver.worker import ReceiverWorker
from sluice.storage.block_store import BlockStoreError
from sluice.tracker.client.tracker_client import BlockStoreMismatch

SECTIONS = ("receiver", "backpressure", "block_store", "kafka", "socket", "generator", "log")
log = logging.getLogger("sluice.receiver.cli")  # not __name__: run as -m it is __main__
EXIT_UNREADABLE = 2  # a receiver stopped on source bytes it cannot read: not worth a restart
EXIT_FORCED = 3  # stopped (second signal, or stop timeout) before every block was acknowledged


def tune_interpreter() -> None:
    """Tune a receiver worker process: GIL switch interval and garbage collector.

    A block's write and fsync run in a thread; each system call it makes hands the GIL back and
    forth with the busy fetch loop, and at the default interval (5 ms) every hand-off can wait,
    which throttles the push pipeline: 0.5 ms here.  A receiver also holds every record of the
    current and queued blocks (up to ``block_queue_size`` intervals of them): they survive the
    young-generation collections, get promoted, and the default thresholds then rescan them over
    and over.  Freezing what start-up allocated and collecting the young generation less often
    removes that cost; records are freed by reference counting as soon as their block is pushed,
    so memory stays bounded.  Only a process that is a receiver worker does this.
    """
    sys.setswitchinterval(0.0005)
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


async def run(config: Config) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if not stop.is_set():
            stop.set()
            return
        # A graceful stop waits for the tracker to acknowledge the last blocks, which may never
        # come (tracker gone).  A second signal gives up: the offsets of unacknowledged blocks
        # were never committed, so the group reads those records again and nothing is lost.
        log.error(
            "second stop signal: exiting without waiting for acknowledgements; "
            "unacknowledged records will be read again"
        )
        os._exit(EXIT_FORCED)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    worker = ReceiverWorker(config)
    await worker.run(stop)
    unreadable = [rid for rid, s in worker.supervisors.items() if isinstance(s.stopping_error, BatchFormatError)]
    if unreadable and not stop.is_set():
        log.error("receivers %s stopped on record batches they cannot read", ", ".join(unreadable))
        return EXIT_UNREADABLE
    refused = [s.stopping_error for s in worker.supervisors.values()]
    refused = [e for e in refused if isinstance(e, (KafkaAuthorizationError, BlockStoreMismatch))]
    if refused and not stop.is_set():
        log.error("%s", refused[0])  # every receiver of a worker shares the principal and the store: one line
        return EXIT_UNREADABLE
    failed = [rid for rid, s in worker.supervisors.items() if s.refused]
    if failed and not stop.is_set():
        log.error("the tracker refused receivers %s", ", ".join(failed))
        return 1
    if worker.abandoned_blocks is not None:
        return EXIT_FORCED
    log.info("receiver worker stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    config, _ = parse_args(
        "sluice-receiver",
        "Sluice receiver worker: source -> rate limiter -> blocks -> tracker",
        sections=SECTIONS,
        home="receiver",
        argv=argv,
    )
    setup_logging(config["log.level"])
    tune_interpreter()
    try:
        web = load_web_config(config["receiver.metrics_web_config"], "receiver.metrics_web_config")
        serve(config["receiver.metrics_port"], config["receiver.metrics_addr"], web)
        return asyncio.run(run(config))
    except (ConfigError, PluginError, BlockStoreError) as exc:
        print(f"sluice-receiver: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sluice-receiver: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
