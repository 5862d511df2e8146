"""``python -m sluice.embedded --fetch``: fetch Apache Kafka's pinned jars into the cache, once
(``make test`` and ``make demo`` run it before anything needs a broker), and for the tests Spark's
own Kafka connector, which the suite compares ``sluice-kafka`` with.

``python -m sluice.embedded --spark-jvm-options`` builds Spark's class-data-sharing archive once
(:mod:`sluice.embedded.class_data`) and prints the options that use it, for ``SPARK_SUBMIT_OPTS``.

``python -m sluice.embedded --worker-bytecode`` adds bytecode to the pyspark zip Spark's Python
workers import (:mod:`sluice.embedded.python_workers`)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from sluice.embedded.class_data import spark_jvm_options
from sluice.embedded.kafka import DEFAULT_VERSION, OLDEST_VERSION, RELEASES, kafka_jars
from sluice.embedded.processes import ProcessError
from sluice.embedded.python_workers import add_bytecode, worker_zip
from sluice.embedded.spark_kafka import CONNECTOR_VERSION, spark_kafka_jars


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sluice.embedded --fetch [--version V ... | --default-only]``: fetch the pinned
    jars; ``--spark-jvm-options``: print the JVM options of Spark's class-data archive."""
    parser = argparse.ArgumentParser(prog="python -m sluice.embedded", description="Fetch Apache Kafka's pinned jars")
    parser.add_argument("--fetch", action="store_true", help="fetch the jars into the cache and print where")
    parser.add_argument(
        "--version",
        action="append",
        choices=sorted(RELEASES),
        help=f"a release to fetch (repeatable; default {DEFAULT_VERSION} and {OLDEST_VERSION})",
    )
    parser.add_argument(
        "--default-only",
        action="store_true",
        help=f"fetch Kafka {DEFAULT_VERSION} only (the demo's), not the other release or Spark's connector",
    )
    parser.add_argument(
        "--spark-jvm-options",
        action="store_true",
        help="build Spark's class-data-sharing archive if missing and print the JVM options that use it",
    )
    parser.add_argument(
        "--no-build",
        action="store_true",
        help="with --spark-jvm-options: print the options only if the archive is built, never build it",
    )
    parser.add_argument(
        "--worker-bytecode",
        action="store_true",
        help="add bytecode to the pyspark zip Spark's Python workers import (once; then it does nothing)",
    )
    args = parser.parse_args(argv)
    if args.worker_bytecode:
        path = worker_zip()
        print(f"{path}: bytecode added for {add_bytecode(path)} modules")
        return 0
    if args.spark_jvm_options:
        try:
            print(" ".join(spark_jvm_options(build=not args.no_build)))
        except ProcessError as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    if not args.fetch:
        parser.error("nothing to do: give --fetch, --spark-jvm-options or --worker-bytecode")
    chosen = args.version or ([DEFAULT_VERSION] if args.default_only else [DEFAULT_VERSION, OLDEST_VERSION])
    for version in chosen:
        began = time.monotonic()
        try:
            jars = kafka_jars(version)
        except ProcessError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"Apache Kafka {version}: {len(jars)} jars in {jars[0].parent} ({time.monotonic() - began:.1f} s)")
    if not (args.default_only or args.version):
        began = time.monotonic()
        try:
            jars = spark_kafka_jars()
        except ProcessError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"Spark's Kafka connector {CONNECTOR_VERSION}: {len(jars)} jars ({time.monotonic() - began:.1f} s)")
    return 0


if __name__ == "__main__":  # walking the package for its API imports this module too
    sys.exit(main())
