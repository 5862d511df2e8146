"""A Structured Streaming query in its own process, so a test can SIGKILL it and start it again.

``python -m tests.structured.apps FORMAT OPTIONS_JSON CHECKPOINT OUT [REMOTE]``: reads
``format(FORMAT)`` with the options, writes each micro-batch with the idempotent sink
(``write_batch_output``: ``OUT/batch_time=<batch id>/`` through a temporary directory and a rename,
replaced when Spark re-runs the batch after a restart) and runs until killed; an ``OUT`` of
``sluice-kafka:TOPIC`` writes ``key`` and ``value`` with the ``sluice-kafka`` sink to ``TOPIC``
instead (its brokers: the options' ``kafka.bootstrap.servers``).  With ``REMOTE``
(``sc://host:port``) the session is a Spark Connect client instead of a local[2] one.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> None:
    fmt, options, checkpoint, out = argv[:4]
    remote = argv[4] if len(argv) > 4 else None
    from pyspark.sql import SparkSession

    from sluice.spark_driver.structured import register

    if remote:
        spark = SparkSession.builder.remote(remote).getOrCreate()
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = (
            SparkSession.builder.master("local[2]")
            .appName(f"sluice-{fmt}-query")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("WARN")
    register(spark)

    def write(df, batch_id: int) -> None:
        df = df.selectExpr("CAST(value AS STRING) AS value")
        if remote:  # a Connect client has no JVM handle: Spark's own overwrite is idempotent per batch too
            df.write.mode("overwrite").json(f"{out}/batch_time={batch_id}")
            return
        from sluice.spark_driver.sinks import write_batch_output

        write_batch_output(df, out, batch_id, "json")

    source = spark.readStream.format(fmt).options(**json.loads(options)).load()
    if out.startswith("sluice-kafka:"):
        stream = (
            source.selectExpr("key", "value")
            .writeStream.format("sluice-kafka")
            .option("kafka.bootstrap.servers", json.loads(options)["kafka.bootstrap.servers"])
            .option("topic", out.removeprefix("sluice-kafka:"))
        )
    else:
        stream = source.writeStream.foreachBatch(write)
    query = stream.option("checkpointLocation", checkpoint).trigger(processingTime="500 milliseconds").start()
    print("query started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
