"""The workload whose classes go into Spark's class-data-sharing archive (:mod:`sluice.embedded.class_data`).

Run as ``python -m sluice.embedded.spark_class_data`` with ``-XX:ArchiveClassesAtExit`` in
``SPARK_SUBMIT_OPTS``: it starts a local SparkSession, runs what every Sluice driver runs first (a
DataFrame job, and an RDD job through Python workers), then closes the gateway and waits for the
driver JVM to exit by itself, since a JVM writes its archive only on a normal exit and PySpark's
own exit does not wait for it.
"""

from __future__ import annotations

import sys

from pyspark import SparkContext
from pyspark.sql import SparkSession


def main() -> int:
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.range(1000).selectExpr("sum(id)").collect()
    spark.sparkContext.parallelize(range(100), 2).map(lambda x: x * 2).sum()
    gateway = SparkContext._gateway
    spark.stop()
    if gateway is None or gateway.proc is None:
        print("no local gateway JVM to wait for", file=sys.stderr)
        return 1
    gateway.proc.stdin.close()  # the gateway server exits when its standard input ends
    return gateway.proc.wait(timeout=240)


if __name__ == "__main__":
    sys.exit(main())
