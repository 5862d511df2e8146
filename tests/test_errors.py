"""One error root: every exception class of the package derives from ``SluiceError``, keeps its
builtin base, says whether retrying can help, and is listed in ``sluice.errors``' table."""

from __future__ import annotations

import builtins
import importlib
import pkgutil
import re

import pytest

import sluice
from sluice import errors
from sluice.block_info import InvalidMessage
from sluice.config import resolve
from sluice.config_key import ConfigError
from sluice.errors import SluiceError
from sluice.kafka.offsets_client import KafkaOffsetsError
from sluice.plugins import UnknownNameError
from sluice.receiver.sources.socket import SourceClosed
from sluice.storage.block_format import CorruptFormatError
from sluice.storage.block_store import BlockCorruptError, LocationRefused
from sluice.tracker.client.connection import ConnectionLost, TrackerAuthError, TrackerUnavailable
from sluice.tracker.log.events import LogWriteFailed
from sluice.tracker.log.wal import WALCorruption
from sluice.tracker.wire.protocol import E_INVALID, E_UNAVAILABLE, FrameTooLarge, RemoteError


def _package_exceptions() -> dict[str, type[Exception]]:
    """Every ``Exception`` subclass defined in a module of the package, by ``module.name``."""
    found: dict[str, type[Exception]] = {}
    for info in pkgutil.walk_packages(sluice.__path__, "sluice."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == info.name:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def _table() -> dict[str, tuple[str, str]]:
    """The rows of ``sluice.errors``' table: ``module.class`` -> (builtin base, retriable)."""
    row = re.compile(r"^(\w+)\s+(sluice[\w.]+)\s+(\w+)\s+(True|False|per code)\s+\S", re.MULTILINE)
    return {f"{m[2]}.{m[1]}": (m[3], m[4]) for m in row.finditer(errors.__doc__ or "")}


def test_every_exception_of_the_package_derives_from_the_root() -> None:
    found = _package_exceptions()
    assert len(found) > 30  # the walk reached the services, not only the core
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, SluiceError))
    assert not outside, f"derive these from sluice.errors.SluiceError: {outside}"


def test_the_table_lists_every_error_with_its_base_and_retriable_flag() -> None:
    found = {name: cls for name, cls in _package_exceptions().items() if cls is not SluiceError}
    table = _table()
    assert sorted(table) == sorted(found), "the table in sluice.errors must list exactly the package's errors"
    for name, (base, retriable) in table.items():
        cls = found[name]
        assert getattr(builtins, base) in cls.__mro__, f"{name} is not a {base}"
        if retriable != "per code":
            assert issubclass(cls, SluiceError) and cls.retriable is (retriable == "True"), (
                f"{name}.retriable is not {retriable}"
            )


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (ConfigError, ValueError),
        (InvalidMessage, ValueError),
        (UnknownNameError, ValueError),
        (CorruptFormatError, ValueError),
        (TrackerUnavailable, ConnectionError),
        (ConnectionLost, ConnectionError),
        (SourceClosed, ConnectionError),
        (TrackerAuthError, PermissionError),
        (WALCorruption, RuntimeError),
    ],
)
def test_errors_keep_their_builtin_base(cls: type[Exception], builtin: type[Exception]) -> None:
    """Callers that catch the builtin keep catching it."""
    with pytest.raises(builtin) as raised:
        raise cls("x")
    assert isinstance(raised.value, SluiceError)


@pytest.mark.parametrize(
    ("cls", "retriable"),
    [
        (TrackerUnavailable, True),
        (ConnectionLost, True),
        (SourceClosed, True),
        (KafkaOffsetsError, True),
        (LogWriteFailed, True),
        (TrackerAuthError, False),
        (ConfigError, False),
        (InvalidMessage, False),
        (FrameTooLarge, False),
        (CorruptFormatError, False),
        (BlockCorruptError, False),
        (LocationRefused, False),
        (WALCorruption, False),
    ],
)
def test_retriable_flags(cls: type[SluiceError], retriable: bool) -> None:
    assert cls("x").retriable is retriable


def test_a_tracker_error_reply_is_retriable_by_its_code() -> None:
    assert RemoteError(E_UNAVAILABLE, "the log is full").retriable is True
    assert RemoteError(E_INVALID, "add_block.stream_id is missing").retriable is False


def test_a_bad_configuration_value_is_caught_as_the_root_and_as_a_value_error() -> None:
    with pytest.raises(SluiceError) as raised:
        resolve(["tracker"], environ={"SLUICE_TRACKER_LISTEN": "nowhere"})
    assert isinstance(raised.value, ConfigError) and isinstance(raised.value, ValueError)
    assert raised.value.retriable is False


def test_library_code_raises_no_bare_builtin_exception() -> None:
    """Every raise in the package is a ``SluiceError`` (a bad argument too: ``InvalidArgument`` is
    still a ``ValueError``), so ``except SluiceError`` catches all that Sluice raises on purpose.
    Re-raising (``raise``, ``raise exc``) and ``NotImplementedError`` in an abstract method are fine."""
    import ast
    from pathlib import Path

    # AttributeError is a module __getattr__'s protocol, AssertionError an invariant the code states
    allowed = {"NotImplementedError", "AttributeError", "AssertionError", "StopIteration", "StopAsyncIteration"}
    root = Path(sluice.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if "testing" in path.relative_to(root).parts:
            continue  # the test launchers raise ProcessError, checked by the walk above
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
                name = node.exc.func.id
                if isinstance(getattr(builtins, name, None), type) and name not in allowed:
                    found.append(f"{path.relative_to(root)}:{node.lineno} raise {name}")
    assert not found, "raise a sluice.errors class instead:\n" + "\n".join(found)


def test_an_argument_error_is_still_the_builtin_it_was() -> None:
    from sluice.spark_driver.triggers import next_batch_time

    with pytest.raises(errors.InvalidArgument, match="must be >= 0 ms"):
        next_batch_time(1500, -5)
    with pytest.raises(ValueError):
        next_batch_time(1500, -5)
