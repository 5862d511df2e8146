"""``register()`` makes a local session's Python workers run the interpreter Sluice is installed in,
so a venv that is not activated works: PySpark's default is ``python3`` from PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sluice
from sluice.spark_driver.structured import workers_python

APP = """
import sys
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
from sluice.spark_driver.structured import register

register(spark)
# load() asks a Python worker for the source's schema: the worker must import sluice
df = spark.readStream.format("sluice").option("tracker", "127.0.0.1:1").load()
print("schema", df.schema.simpleString(), flush=True)
"""


def bare_python3(directory: Path) -> Path:
    """A directory whose ``python3`` has PySpark and its dependencies but not Sluice, like a system
    interpreter: this venv's packages minus Sluice (its editable install is a .pth, left out)."""
    import pyspark

    site = Path(pyspark.__file__).parent.parent
    packages = directory / "site"
    packages.mkdir(parents=True)
    for entry in site.iterdir():
        if not entry.name.startswith(("__editable__", "sluice")) and entry.suffix != ".pth":
            (packages / entry.name).symlink_to(entry)
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "python3"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={packages} exec {os.path.realpath(sys.executable)} "$@"\n')
    shim.chmod(0o755)
    return bin_dir


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_register_works_when_python3_on_path_has_no_sluice(tmp_path: Path) -> None:
    bin_dir = bare_python3(tmp_path / "bare")
    probe = subprocess.run(
        [str(bin_dir / "python3"), "-c", "import sluice"], capture_output=True, text=True, cwd=tmp_path
    )
    assert "No module named 'sluice'" in probe.stderr, "the bare python3 must not see Sluice"
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    env["PYTHONPATH"] = str(Path(sluice.__file__).parent.parent)  # the Sluice under test, for this interpreter
    (tmp_path / "app.py").write_text(APP)
    result = subprocess.run(
        [sys.executable, str(tmp_path / "app.py")], capture_output=True, text=True, timeout=540, env=env, cwd=tmp_path
    )
    assert result.returncode == 0 and "schema struct<key:binary,value:binary" in result.stdout, result.stderr[-3000:]


@pytest.mark.spark
def test_an_explicit_choice_is_left_alone(spark, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/chosen/python")
    before = spark.sparkContext.pythonExec
    assert workers_python(spark) is None and spark.sparkContext.pythonExec == before
