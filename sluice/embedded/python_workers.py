"""Bytecode for the pyspark that Spark's Python workers import: ``$SPARK_HOME/python/lib/pyspark.zip``.

Spark puts that zip first on every Python worker's path, ahead of the installed package, and the
zip that pip installs holds sources only.  zipimport never writes bytecode, so every worker compiles
pyspark's modules again: the import of a Python data source's streaming runner costs 1.6 CPU
seconds from the zip against 0.5 from the installed package's cached bytecode, on this project's
two-core reference machine.  Spark gives a worker it starts without its daemon (a Python data
source's planning and streaming runners) 10 s to connect back, a bound hard-coded in
``PythonWorkerFactory``; on a loaded machine the compile alone went past it, and the query
failed with "Python worker failed to connect back".

:func:`add_bytecode` writes each module's bytecode into the zip beside its source, once, in the
layout zipimport reads (``module.pyc`` next to ``module.py``) and as unchecked-hash pycs: the zip's
entries carry no modification time a timestamp pyc could be checked against.  The sources stay, so
tracebacks still show them; a zip that already has bytecode is left alone.  Only the suite's
environment does this (``make kafka``): it starts hundreds of queries on two cores.
"""

from __future__ import annotations

import copy
import importlib.util
import io
import marshal
import warnings
import zipfile
from pathlib import Path
from types import CodeType

from sluice.durable import atomic_write
from sluice.errors import InvalidState

__all__ = ["add_bytecode", "worker_zip"]


def worker_zip() -> Path:
    """The zip Spark's Python workers import pyspark from (``$SPARK_HOME`` is the installed package)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise InvalidState("pyspark is not installed: Spark's Python workers have no zip to import")
    return Path(spec.origin).parent / "python" / "lib" / "pyspark.zip"


def add_bytecode(zip_path: Path) -> int:
    """Add a ``.pyc`` beside every ``.py`` of ``zip_path`` that has none; returns how many were added.

    The new zip replaces the old one whole (:func:`sluice.durable.atomic_write`), so a worker
    starting meanwhile reads one zip or the other."""
    with zipfile.ZipFile(zip_path) as source:
        names = set(source.namelist())
        missing = {n for n in names if n.endswith(".py") and n + "c" not in names}
        if not missing:
            return 0
        built = io.BytesIO()
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                data = source.read(info)
                # a copy: writing records the new zip's offsets in the entry it is given
                target.writestr(copy.copy(info), data)
                if info.filename in missing:
                    with warnings.catch_warnings():  # pyspark's own tests' warnings are not ours to print
                        warnings.simplefilter("ignore", SyntaxWarning)
                        code = compile(data, f"{zip_path}/{info.filename}", "exec", dont_inherit=True)
                    target.writestr(info.filename + "c", _unchecked_pyc(code, data))
    atomic_write(zip_path, built.getvalue())
    return len(missing)


def _unchecked_pyc(code: CodeType, data: bytes) -> bytes:
    """A pyc that zipimport loads without comparing it to its source (PEP 552: the flags say
    hash-based and not checked, then the source's hash, then the code)."""
    flags = (0b01).to_bytes(4, "little")
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(data) + marshal.dumps(code)
