"""Settings in one place: every default is written once, in the schema (:data:`sluice.config.SCHEMA`).

The settings dataclasses take each default from the key they mirror; the constructors that take
settings, and every ``DEFAULTS``-like table in the package, are read as source and may not spell a
schema default out again: a second copy drifts from the first without any test noticing.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.config import SCHEMA, ConfigError, Key, key, resolve
from sluice.receiver.block_generator import BlockGenerator
from sluice.receiver.block_pusher import BlockPusher
from sluice.receiver.supervisor import ReceiverSupervisor
from sluice.settings import DriverSettings, KafkaSettings, ReceiverSettings, TrackerSettings, with_overrides
from sluice.spark_driver.direct.source import DirectKafkaSource
from sluice.spark_driver.driver import StreamingDriver
from sluice.spark_driver.job_scheduler import JobScheduler
from sluice.spark_driver.rate_loop import RateLoop
from sluice.tracker.log.wal import WriteAheadLog
from sluice.tracker.server.recovery import open_service
from sluice.tracker.server.registry import ReceiverRegistry
from sluice.tracker.server.server import TrackerServer
from sluice.tracker.server.service import TrackerService

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = (DriverSettings, ReceiverSettings, KafkaSettings, TrackerSettings)

#: Each callable that takes settings (or is handed them field by field), with its settings class.
TAKES_SETTINGS: dict[Callable[..., Any], type] = {
    StreamingDriver.__init__: DriverSettings,
    JobScheduler.__init__: DriverSettings,
    RateLoop.__init__: DriverSettings,
    ReceiverSupervisor.__init__: ReceiverSettings,
    BlockPusher.__init__: ReceiverSettings,
    BlockGenerator.__init__: ReceiverSettings,
    DirectKafkaSource.__init__: KafkaSettings,
    TrackerService.__init__: TrackerSettings,
    ReceiverRegistry.__init__: TrackerSettings,
    TrackerServer.__init__: TrackerSettings,
    WriteAheadLog.__init__: TrackerSettings,
    open_service: TrackerSettings,
}

#: Parameter names that spell a field differently (the log's own names for its segment limits).
ALIASES = {"segment_bytes": "wal_segment_bytes", "segment_ms": "wal_segment_ms"}


def schema_value(f: dataclasses.Field) -> Any:
    convert = f.metadata["convert"]
    default = key(f.metadata["key"]).default
    return convert(default) if convert else default


def field_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    assert f.default_factory is not dataclasses.MISSING, f"{f.name} has no default"
    return f.default_factory()


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: s.__name__)
def test_every_setting_mirrors_a_schema_key_and_takes_its_default(settings: type) -> None:
    for f in dataclasses.fields(settings):
        assert "key" in f.metadata, f"{settings.__name__}.{f.name} names no schema key"
        assert field_default(f) == schema_value(f), f"{settings.__name__}.{f.name}"


def test_settings_from_a_resolved_config_follow_the_environment() -> None:
    config = resolve(
        ["driver", "backpressure", "estimator", "receiver", "kafka", "tracker"],
        environ={
            "SLUICE_DRIVER_BATCH_INTERVAL_MS": "250",
            "SLUICE_RECEIVER_MAX_BLOCK_BYTES": "0",
            "SLUICE_BACKPRESSURE_INITIAL_RATE": "500",
            "SLUICE_KAFKA_TOPIC": "a,b",
            "SLUICE_TRACKER_RATE_SPLIT": "lag",
        },
    )
    assert DriverSettings.from_config(config) == DriverSettings(batch_interval_ms=250, initial_rate=500.0)
    assert ReceiverSettings.from_config(config) == ReceiverSettings(max_block_bytes=None, initial_rate=500.0)
    assert KafkaSettings.from_config(config).topics == "a,b"
    assert TrackerSettings.from_config(config).rate_split == "lag"


def test_receivers_apply_the_initial_rate_only_with_backpressure_on() -> None:
    config = resolve(
        ["receiver", "backpressure"],
        environ={"SLUICE_BACKPRESSURE_INITIAL_RATE": "500", "SLUICE_BACKPRESSURE_ENABLED": "false"},
    )
    assert ReceiverSettings.from_config(config).initial_rate is None


def test_a_setting_given_by_keyword_replaces_the_default_and_an_unknown_one_is_named() -> None:
    assert with_overrides(DriverSettings(), {"batch_interval_ms": 50}, "x").batch_interval_ms == 50
    with pytest.raises(TypeError, match=r"StreamingDriver got unknown setting\(s\) batch_interval; allowed: .*"):
        StreamingDriver(object(), tracker="127.0.0.1:1", batch_interval=50)


def test_a_bad_setting_from_the_schema_is_still_refused_by_the_config() -> None:
    with pytest.raises(ConfigError, match="driver.batch_interval_ms"):
        resolve(["driver"], environ={"SLUICE_DRIVER_BATCH_INTERVAL_MS": "0"})


# -- no default written twice ------------------------------------------------------------------------


def _constant(node: ast.expr) -> tuple[bool, Any]:
    """(True, value) when ``node`` is a constant expression (``64 << 20`` too); (False, None) else."""
    try:
        return True, ast.literal_eval(node)
    except ValueError:
        pass
    if any(isinstance(n, ast.Name | ast.Attribute | ast.Call) for n in ast.walk(node)):
        return False, None
    try:
        return True, eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}})
    except Exception:  # noqa: BLE001 - not a constant after all
        return False, None


def _same(value: Any, default: Any) -> bool:
    if value is None or isinstance(value, bool) != isinstance(default, bool):
        return False
    return bool(value == default)


def _parameter_defaults(fn: Callable[..., Any]) -> Iterator[tuple[str, ast.expr]]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    args = node.args
    positional = args.posonlyargs + args.args
    yield from ((a.arg, d) for a, d in zip(positional[len(positional) - len(args.defaults) :], args.defaults))
    yield from ((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)


def repeated_defaults(fn: Callable[..., Any], settings: type) -> list[str]:
    """The parameters of ``fn`` whose default is a literal equal to the schema default they mirror."""
    fields = {f.name: f for f in dataclasses.fields(settings)}
    found = []
    for name, node in _parameter_defaults(fn):
        f = fields.get(ALIASES.get(name, name))
        if f is None:
            continue
        is_constant, value = _constant(node)
        if is_constant and _same(value, schema_value(f)):
            found.append(f"{fn.__qualname__}({name}={ast.unparse(node)}) repeats {f.metadata['key']}")
    return found


def _by_short_name() -> dict[str, Key]:
    names = {k.name.replace(".", "_"): k for k in SCHEMA}
    for settings in SETTINGS:
        names.update({f.name: key(f.metadata["key"]) for f in dataclasses.fields(settings)})
    return names


def repeated_in_tables(source: str, where: str) -> list[str]:
    """Entries of module-level ``*DEFAULTS`` dict literals that repeat the schema default of their name."""
    names = _by_short_name()
    found = []
    for node in ast.parse(source).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if not (isinstance(target, ast.Name) and target.id.endswith("DEFAULTS") and isinstance(value, ast.Dict)):
            continue
        for k, v in zip(value.keys, value.values):
            if not isinstance(k, ast.Constant) or k.value not in names:
                continue
            is_constant, literal = _constant(v)
            if is_constant and _same(literal, names[k.value].default):
                found.append(f"{where}: {target.id}[{k.value!r}] = {ast.unparse(v)} repeats {names[k.value].dotted}")
    return found


def package_sources() -> Iterator[Path]:
    yield from (ROOT / "sluice").rglob("*.py")


def test_no_constructor_that_takes_settings_repeats_a_schema_default() -> None:
    found = [line for fn, settings in TAKES_SETTINGS.items() for line in repeated_defaults(fn, settings)]
    assert not found, "defaults written twice:\n" + "\n".join(found)


@pytest.mark.slow
def test_no_defaults_table_repeats_a_schema_default() -> None:
    sources = list(package_sources())
    assert len(sources) > 60  # the walk reached the package
    found = [line for p in sources for line in repeated_in_tables(p.read_text(), str(p.relative_to(ROOT)))]
    assert not found, "defaults written twice:\n" + "\n".join(found)


def test_the_scans_catch_a_repeated_default() -> None:
    """The scans above would see a copy: a literal default, and a table entry, equal to the schema's."""

    def driver(*, batch_interval_ms: int = 1000, max_block_bytes: int = 64 << 20) -> None: ...

    def blocks(*, max_block_bytes: int = 64 << 20, block_queue_size: int = 11) -> None: ...

    [found] = repeated_defaults(driver, DriverSettings)
    assert found.endswith("driver(batch_interval_ms=1000) repeats driver.batch_interval_ms")
    assert len(repeated_defaults(blocks, ReceiverSettings)) == 1
    table = 'DEFAULTS = {"group_id": "sluice", "max_retries": 3, "checkpoint_dir": "./sluice-checkpoint"}'
    assert repeated_in_tables(table, "t.py") == [
        "t.py: DEFAULTS['group_id'] = 'sluice' repeats kafka.group_id",
        "t.py: DEFAULTS['checkpoint_dir'] = './sluice-checkpoint' repeats driver.checkpoint_dir",
    ]
