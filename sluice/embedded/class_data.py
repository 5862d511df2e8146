"""Class-data-sharing archives for the JVMs Sluice starts: Apache Kafka's broker and Spark's driver.

A JVM started with ``-XX:SharedArchiveFile`` maps the classes an earlier run of the same classpath
loaded, instead of reading, parsing and verifying them from the jars again.  Spark's driver loads
some ten thousand classes before its first job: with its archive a SparkSession's start and two
small jobs cost about 7 CPU seconds instead of 11 on this project's two-core reference machine, and
the suite starts a Spark application (a test's session, every driver and query it runs) hundreds of
times.  The broker's start halves the same way (7 s to under 4 s).

An archive is valid only for the same jars and the same JVM build, hence its name
(:func:`archive_path`): another one is simply another file.  A JVM given a stale or foreign archive
starts without it; :func:`shared_options` also silences the warning it would print then, so that a
classpath a test changes (``SPARK_CONF_DIR``, an extra class path) costs the speed-up only.

``python -m sluice.embedded --spark-jvm-options`` builds Spark's archive once (about half a minute:
a JVM writes it as it exits, after a short workload, see :mod:`sluice.embedded.spark_class_data`)
and prints the options for ``SPARK_SUBMIT_OPTS``; the broker writes its own the first time it
stops cleanly (:class:`sluice.embedded.kafka.KafkaBroker`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from sluice.embedded.maven import cache_root
from sluice.embedded.processes import ProcessError

__all__ = ["archive_path", "keep_archive", "shared_options", "spark_archive", "spark_jvm_options"]

# The quiet form of a refused archive: ``cds`` and ``cds+dynamic`` are where a JVM warns that it
# could not map one (and then runs without it, as it should).
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def archive_path(name: str, classpath: Sequence[Path]) -> Path:
    """Where the archive for ``classpath`` under this JVM build lives (maybe not yet): ``name`` plus
    a digest of the JVM's library and of each jar's path, size and modification time."""
    java = Path(shutil.which("java") or "java").resolve()
    libjvm = java.parent.parent / "lib" / "server" / "libjvm.so"
    key = hashlib.sha256()
    for path in (libjvm if libjvm.exists() else java, *classpath):
        stat = path.stat()
        key.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return cache_root() / "cds" / f"{name}-{key.hexdigest()[:16]}.jsa"


def shared_options(archive: Path) -> list[str]:
    """The options that map ``archive``, or none while it does not exist: a JVM pointed at a missing
    file turns sharing off altogether, the JDK's own base archive included."""
    return [f"-XX:SharedArchiveFile={archive}", *QUIET] if archive.is_file() else []


def keep_archive(dumped: Path, archive: Path) -> None:
    """Move an archive a JVM just wrote to ``archive``, whole: two first runs that race both write
    one, and either may win."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    staged = archive.with_name(f".{archive.name}.{uuid.uuid4().hex[:8]}")
    shutil.move(dumped, staged)  # the cache may be on another filesystem than the JVM's directory
    os.replace(staged, archive)


def spark_archive() -> Path:
    """The archive for the classpath ``spark-submit`` gives the driver of this PySpark: its jars."""
    import pyspark  # only a Spark archive needs PySpark; the broker's module does not load it

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    return archive_path(f"spark-{pyspark.__version__}", jars)


def spark_jvm_options(timeout: float = 900.0, *, build: bool = True) -> list[str]:
    """Build Spark's archive if this machine has none yet (unless ``build`` is false), then return
    the options that use it: none while there is no archive.

    The workload runs in a child process (:mod:`sluice.embedded.spark_class_data`), whose driver
    JVM writes the archive when its Python side closes the gateway and the JVM exits normally.  It
    takes about half a minute on a quiet two-core machine, minutes on a loaded one (the bound).
    """
    archive = spark_archive()
    if build and not archive.is_file():
        with tempfile.TemporaryDirectory(prefix="sluice-cds-") as scratch:
            dumped = Path(scratch) / "spark.jsa"
            env = {
                **os.environ,
                "SPARK_SUBMIT_OPTS": f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -XX:ArchiveClassesAtExit={dumped}",
            }
            command = [sys.executable, "-m", "sluice.embedded.spark_class_data"]
            try:
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                raise ProcessError(f"Spark's class-data workload did not end within {timeout:.0f} s") from exc
            if done.returncode != 0 or not dumped.is_file():
                tail = "\n".join(done.stderr.splitlines()[-15:])
                raise ProcessError(f"Spark's class-data workload wrote no archive (exit {done.returncode}):\n{tail}")
            keep_archive(dumped, archive)
    return shared_options(archive)
