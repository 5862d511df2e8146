"""Spark's own Kafka source (``format("kafka")``, ``spark-sql-kafka-0-10``) in a running SparkSession,
for the tests and benchmarks that hold ``format("sluice-kafka")`` against it.

PySpark ships without the connector: ``spark-submit --packages`` or ``spark.jars`` put it on the
classpath when the JVM starts.  A test run has one SparkSession per worker, started before any test
asks for Spark's source, so :func:`add_spark_kafka` adds the jars to the live session instead,
through Spark SQL's ``ADD JAR`` (the session's jar class loader, from which Spark looks up a data
source by name, and the executors' task class loaders): the session's other tests pay nothing, and
no second JVM is started.

The jars come from Maven Central through :func:`sluice.embedded.maven.fetch_jars` (cached outside
the repository).  Those PySpark already ships (the Scala library, lz4, snappy, slf4j, Hadoop's
client) are left out, so the connector runs against the session's own copies, as it does when
``--packages`` resolves it into a Spark distribution.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sluice.embedded.maven import fetch_jars

__all__ = ["CONNECTOR_VERSION", "add_spark_kafka", "spark_kafka_jars", "use_session_jars"]

# The connector release: PySpark's own version where Maven Central has it.  PySpark 4.3.0 is on
# PyPI but Central's newest spark-sql-kafka-0-10_2.13 is 4.2.0; the 4.2 connector runs on Spark
# 4.3 (its data source and offset APIs are unchanged), so that is the one fetched until 4.3 is there.
CONNECTOR_VERSION = "4.2.0"


def _artifact(jar: Path) -> str:
    """``kafka-clients`` of ``kafka-clients-3.9.2.jar``: a jar's name without its version."""
    return jar.name.rsplit("-", 1)[0]


def spark_kafka_jars(version: str = CONNECTOR_VERSION) -> list[Path]:
    """The connector's jars and those of its runtime dependencies that PySpark does not ship."""
    import pyspark  # heavy, and python -m sluice.embedded --fetch imports this module for the demo too

    shipped = {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    coordinate = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
    return [jar for jar in fetch_jars(f"spark-sql-kafka-{version}", [coordinate]) if _artifact(jar) not in shipped]


def add_spark_kafka(spark: Any, version: str = CONNECTOR_VERSION) -> None:
    """Make ``format("kafka")`` available in ``spark`` (a classic SparkSession).

    ``ADD JAR`` also points the calling thread's context class loader at the session's jar class
    loader, and Spark looks data sources up through the context class loader: a query planned on
    another Python thread (another JVM thread under PySpark's pinned threads) calls this again.
    """
    for jar in spark_kafka_jars(version):
        spark.sql(f"ADD JAR '{jar}'")
    use_session_jars(spark)


def use_session_jars(spark: Any) -> None:
    """Point the JVM thread serving the calling Python thread at the session's jar class loader.

    py4j serves a Python thread from the JVM thread of its current connection, and a new
    connection is a new JVM thread: call this right before planning a ``format("kafka")`` query,
    not only once after ``ADD JAR``."""
    jvm = spark.sparkContext._jvm
    jvm.java.lang.Thread.currentThread().setContextClassLoader(spark._jsparkSession.sharedState().jarClassLoader())
