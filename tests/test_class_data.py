"""Spark's and the broker's class-data-sharing archives (:mod:`sluice.embedded.class_data`): an
archive is named for its exact classpath and JVM, a missing one adds no option (which would turn
the JDK's own sharing off), the archive ``make test`` builds is one the test session's own driver
classpath maps, the broker takes its JVM options from where Kafka's own scripts do, and a standalone
cluster's daemons and executors take the drivers'."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.embedded.class_data import archive_path, keep_archive, shared_options, spark_archive
from sluice.embedded.kafka import BROKER_HEAP, BROKER_PERFORMANCE, broker_jvm_options


def test_an_archive_is_named_for_its_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_CACHE", str(tmp_path / "cache"))
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"one")
    before = archive_path("kafka-4.4.0", [jar])
    assert before.parent == tmp_path / "cache" / "cds" and before.name.startswith("kafka-4.4.0-")
    jar.write_bytes(b"other")  # another size: another archive, never a stale one
    assert archive_path("kafka-4.4.0", [jar]) != before


def test_a_missing_archive_adds_no_option_and_a_kept_one_is_used(tmp_path: Path) -> None:
    archive = tmp_path / "cds" / "spark.jsa"
    assert shared_options(archive) == []
    dumped = tmp_path / "dumped.jsa"
    dumped.write_bytes(b"archive")
    keep_archive(dumped, archive)
    assert not dumped.exists() and archive.read_bytes() == b"archive"
    assert shared_options(archive)[0] == f"-XX:SharedArchiveFile={archive}"


def test_the_tiers_option_never_builds_an_archive(tmp_path: Path) -> None:
    """What every tier's ``SPARK_SUBMIT_OPTS`` substitutes: with no archive it prints nothing at
    once, where building one would start Spark (minutes on a loaded machine, once per tier)."""
    done = subprocess.run(
        [sys.executable, "-m", "sluice.embedded", "--spark-jvm-options", "--no-build"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SLUICE_CACHE": str(tmp_path / "cache")},
    )
    assert done.returncode == 0 and done.stdout.strip() == "", done
    assert not (tmp_path / "cache" / "cds").exists()


@pytest.mark.slow
def test_the_built_spark_archive_maps_on_the_drivers_classpath(spark) -> None:
    """``-Xshare:on`` makes a JVM fail rather than start without the archive, so this fails on an
    archive built for another classpath or JVM, or never built (``make test`` builds it first)."""
    archive = spark_archive()
    assert archive.is_file(), f"no Spark class-data archive at {archive}: run `make kafka`"
    classpath = spark.sparkContext._jvm.System.getProperty("java.class.path")
    done = subprocess.run(
        ["java", "-Xshare:on", f"-XX:SharedArchiveFile={archive}", "-cp", classpath, "-version"],
        capture_output=True,
        text=True,
        env={**os.environ, "JAVA_TOOL_OPTIONS": ""},
    )
    assert done.returncode == 0, done.stderr
    assert "sharing" in done.stderr


def test_the_broker_reads_its_jvm_options_as_kafkas_scripts_do() -> None:
    assert broker_jvm_options({}) == [*BROKER_HEAP, *BROKER_PERFORMANCE]
    quick = {"KAFKA_JVM_PERFORMANCE_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", "KAFKA_HEAP_OPTS": " "}
    assert broker_jvm_options(quick) == [*BROKER_HEAP, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


def test_a_clusters_daemons_and_executors_start_as_the_drivers_do(monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.testing.standalone import cluster_jvm

    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    monkeypatch.delenv("SPARK_DAEMON_JAVA_OPTS", raising=False)
    assert cluster_jvm() == ({}, {})  # Spark's own defaults everywhere
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")
    assert cluster_jvm() == (
        {"SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1"},
        {"spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1"},
    )
    monkeypatch.setenv("SPARK_DAEMON_JAVA_OPTS", "-Xss2m")  # the caller's own is kept
    assert cluster_jvm()[0] == {"SPARK_DAEMON_JAVA_OPTS": "-Xss2m"}
