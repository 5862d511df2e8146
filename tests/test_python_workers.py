"""The pyspark zip Spark's Python workers import gets its modules' bytecode, and they load it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from sluice.embedded.python_workers import add_bytecode, worker_zip


def test_each_module_gets_bytecode_once_and_a_worker_imports_it_not_the_source(tmp_path: Path) -> None:
    zip_path = tmp_path / "pyspark.zip"
    with zipfile.ZipFile(zip_path, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/mod.py", "VALUE = 6 * 7\n")
        z.writestr("pkg/data.txt", "not a module")
    zip_path.chmod(0o644)
    assert add_bytecode(zip_path) == 2
    assert add_bytecode(zip_path) == 0  # done once: the zip is left alone after
    assert zip_path.stat().st_mode & 0o777 == 0o644
    with zipfile.ZipFile(zip_path) as z:
        assert sorted(z.namelist()) == [
            "pkg/__init__.py",
            "pkg/__init__.pyc",
            "pkg/data.txt",
            "pkg/mod.py",
            "pkg/mod.pyc",
        ]
        assert z.read("pkg/mod.py") == b"VALUE = 6 * 7\n"  # the source stays, for tracebacks
    found = subprocess.run(
        [sys.executable, "-c", "import pkg.mod; print(pkg.mod.VALUE, pkg.mod.__file__)"],
        env={"PYTHONPATH": str(zip_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert found == ["42", f"{zip_path}/pkg/mod.pyc"]  # zipimport took the bytecode


def test_the_zip_is_the_one_spark_puts_first_on_a_workers_path() -> None:
    path = worker_zip()
    assert path.is_file() and path.parts[-4:] == ("pyspark", "python", "lib", "pyspark.zip")
