"""Idempotent per-batch output: ``path/batch_time=<t>/`` written through a temp dir and a rename.

A driver that dies mid-batch re-runs that batch on restart (the tracker still has it allocated but
not completed).  If the first run had already written part or all of its output, appending again
would duplicate records; writing under a hidden temporary name and renaming it over the batch's
directory makes the last complete run win.  Hidden names (leading ``_``) are skipped by Spark's
readers and partition discovery, so ``spark.read.json(path)`` never sees a half-written batch.

The Hadoop ``FileSystem`` API (through the JVM) does the renames, so the same code serves
``file://`` paths and any file system Spark can write to with atomic directory renames.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from sluice.errors import InvalidArgument, SluiceError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

FORMATS = ("json", "parquet", "csv", "orc", "text")


class OutputError(SluiceError, OSError):
    """A batch's output could not be put in place (a rename the filesystem refused)."""


def batch_dir_name(batch_time_ms: int) -> str:
    return f"batch_time={batch_time_ms}"


def _prepare(spark, path: str, batch_time_ms: int):
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    Path = jvm.org.apache.hadoop.fs.Path
    base = Path(path)
    fs = base.getFileSystem(conf)
    name = batch_dir_name(batch_time_ms)
    # Leftovers of a run that died between write and rename: never visible, but they take space.
    for pattern in (f"_tmp_{name}_*", f"_old_{name}_*"):
        for status in fs.globStatus(Path(base, pattern)) or []:
            fs.delete(status.getPath(), True)
    return Path, base, fs, name


def _publish(Path, base, fs, name: str, tmp, batch_time_ms: int, token: str) -> str:
    """Rename ``tmp`` to the batch's directory, moving an earlier run's output aside first."""
    final = Path(base, name)
    old = None
    if fs.exists(final):
        old = Path(base, f"_old_{name}_{token}")
        if not fs.rename(final, old):
            raise OutputError(f"batch {batch_time_ms}: could not move the previous output {final.toString()} aside")
    if not fs.rename(tmp, final):
        raise OutputError(f"batch {batch_time_ms}: could not rename {tmp.toString()} to {final.toString()}")
    if old is not None:
        fs.delete(old, True)
    return final.toString()


def write_batch_output(df: DataFrame, path: str, batch_time_ms: int, fmt: str) -> str:
    """Write ``df`` as ``fmt`` into ``path/batch_time=<batch_time_ms>``; replaces an earlier run."""
    if fmt not in FORMATS:
        raise InvalidArgument(f"output format {fmt!r} is not supported: use one of {', '.join(FORMATS)}")
    Path, base, fs, name = _prepare(df.sparkSession, path, batch_time_ms)
    token = uuid.uuid4().hex[:12]
    tmp = Path(base, f"_tmp_{name}_{token}")
    df.write.mode("overwrite").format(fmt).save(tmp.toString())
    return _publish(Path, base, fs, name, tmp, batch_time_ms, token)
