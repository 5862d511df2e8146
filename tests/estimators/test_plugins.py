"""The registry: built-ins through the hook, plugins through real entry points, and failures."""

from __future__ import annotations

import logging

import pytest

from sluice import estimators
from sluice.estimators import (
    ConstantEstimator,
    DuplicateNameError,
    PIDRateEstimator,
    PluginError,
    UnknownNameError,
)
from sluice.estimators.builtin import config_options
from tests.estimators.fixture_plugins import good_plugin


def test_builtins_come_through_the_hook() -> None:
    assert {"pid", "constant"} <= set(estimators.available())
    assert isinstance(estimators.create("pid", 1000), PIDRateEstimator)
    assert estimators.create("constant", 1000, {"rate": 300}).compute(0, 0, 0, 0) == 300.0


def test_pid_options_are_sparks_key_names() -> None:
    pid = estimators.create("pid", 2000, {"proportional": 0.5, "integral": "0.1", "derived": 0.3, "min_rate": 7})
    assert isinstance(pid, PIDRateEstimator)
    assert (pid.batch_interval_ms, pid.proportional, pid.integral, pid.derivative, pid.min_rate) == (
        2000,
        0.5,
        0.1,
        0.3,
        7,
    )


@pytest.mark.parametrize(
    "name, options, message",
    [
        (
            "pid",
            {"derivative": 1.0},
            r"unknown option\(s\) 'derivative'; allowed: derived, integral, "
            r"min_rate, proportional",
        ),
        ("pid", {"proportional": "fast"}, r"option 'proportional' must be a number, got 'fast'"),
        ("pid", {"integral": True}, r"option 'integral' must be a number"),
        ("pid", {"min_rate": 0}, r"min_rate must be a finite number > 0"),
        ("pid", {"proportional": -1}, r"proportional must be a finite number >= 0"),
        ("constant", {}, r"option 'rate' is required"),
        ("constant", {"rate": 5, "burst": 1}, r"unknown option\(s\) 'burst'; allowed: rate"),
        ("constant", {"rate": -5}, r"rate must be a finite number > 0"),
    ],
)
def test_builtin_factories_check_options(name: str, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        estimators.create(name, 1000, options)


@pytest.mark.parametrize("interval", [0, -1, float("nan"), "1000", True])
def test_batch_interval_is_checked(interval) -> None:
    with pytest.raises(ValueError, match="batch_interval_ms must be a finite number > 0"):
        estimators.create("constant", interval, {"rate": 1})


def test_unknown_name_lists_the_available_ones() -> None:
    with pytest.raises(
        UnknownNameError,
        match=r"unknown rate estimator 'pdi'; available: .*"
        r"constant, .*pid",
    ) as info:
        estimators.create("pdi", 1000)
    assert isinstance(info.value, ValueError)


def test_config_options_maps_the_estimator_section() -> None:
    section = {
        "name": "pid",
        "pid.proportional": 1.0,
        "pid.integral": 0.2,
        "pid.derived": 0.0,
        "pid.min_rate": 100.0,
        "options": {"rate": 5},
    }
    assert config_options("pid", section) == {"proportional": 1.0, "integral": 0.2, "derived": 0.0, "min_rate": 100.0}
    assert config_options("constant", section) == {"rate": 5}
    assert isinstance(estimators.create("pid", 1000, config_options("pid", section)), PIDRateEstimator)


def test_installed_plugin_is_reachable_by_create(install_plugin) -> None:
    module = install_plugin("fixed_step", good_plugin())
    assert "fixed-step" in estimators.available()
    est = estimators.create("fixed-step", 1000, {"step": 5})
    assert type(est).__module__ == module and type(est).__name__ == "FixedStep"
    assert est.compute(1000, 1000, 500, 0) == 2005.0
    with pytest.raises(ValueError, match=r"fixed-step: unknown option\(s\) \['speed'\]"):
        estimators.create("fixed-step", 1000, {"speed": 1})


def test_broken_plugin_is_reported_and_hides_nothing(install_plugin, caplog) -> None:
    install_plugin("aaa_broken", "raise ImportError('no module named numpyy')\n")
    install_plugin(
        "bbb_raises",
        """
        import pluggy
        @pluggy.HookimplMarker("sluice")
        def sluice_register_estimators():
            raise RuntimeError("hook exploded")
    """,
    )
    install_plugin("ccc_no_hook", "def sluice_register_estimators():\n    return {}\n")
    install_plugin("zzz_good", good_plugin())
    with caplog.at_level(logging.WARNING, logger="sluice.plugins"):
        names = estimators.available()
    assert {"fixed-step", "pid", "constant"} <= set(names)
    failures = {f.plugin: str(f) for f in estimators.plugin_failures()}
    assert "no module named numpyy" in failures["aaa_broken"]
    assert "entry point aaa_broken = sluice_fixture_aaa_broken" in failures["aaa_broken"]
    assert "sluice-fixture-aaa_broken 1.0" in failures["aaa_broken"]
    assert "hook exploded" in failures["bbb_raises"]
    assert "no @hookimpl" in failures["ccc_no_hook"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "'aaa_broken'" in logged and "the other plugins stay available" in logged
    # a name the broken plugin might have provided: the error says which plugins failed
    with pytest.raises(UnknownNameError, match=r"plugins that failed to load: plugin 'aaa_broken'"):
        estimators.create("numpyy-rate", 1000)
    assert estimators.create("fixed-step", 1000, {}).compute(1000, 10, 10, 0) == 1001.0


def test_duplicate_name_names_both_plugins(install_plugin) -> None:
    install_plugin("first_twin", good_plugin('{"twin": factory}'))
    install_plugin("second_twin", good_plugin('{"twin": factory}'))
    with pytest.raises(DuplicateNameError) as info:
        estimators.create("twin", 1000)
    message = str(info.value)
    assert "'twin' is registered twice" in message
    assert "plugin 'first_twin'" in message and "plugin 'second_twin'" in message
    assert "twin" not in estimators.available()  # ambiguous names are not offered
    assert "pid" in estimators.available()  # and nothing else is hidden


def test_plugin_reusing_a_builtin_name_is_a_duplicate(install_plugin) -> None:
    install_plugin("shadow", good_plugin('{"pid": factory}'))
    with pytest.raises(DuplicateNameError, match=r"plugin 'sluice-estimators' \(built-in.*plugin 'shadow'"):
        estimators.create("pid", 1000)
    assert isinstance(estimators.create("constant", 1000, {"rate": 1}), ConstantEstimator)


def test_factory_bugs_and_non_estimators_are_plugin_errors(install_plugin) -> None:
    install_plugin(
        "bad_factories",
        """
        import pluggy
        @pluggy.HookimplMarker("sluice")
        def sluice_register_estimators():
            return {"crashes": lambda b, o: 1 / 0, "not-an-estimator": lambda b, o: object(),
                    "": lambda b, o: None, "not-callable": 42}
    """,
    )
    with pytest.raises(PluginError, match=r"'crashes' of plugin 'bad_factories'.*ZeroDivisionError"):
        estimators.create("crashes", 1000)
    with pytest.raises(PluginError, match=r"has no compute\(\) method"):
        estimators.create("not-an-estimator", 1000)
    failures = [str(f) for f in estimators.plugin_failures() if f.plugin == "bad_factories"]
    assert len(failures) == 2 and any("not-callable" in f for f in failures)


def test_pid_defaults_are_the_configuration_defaults() -> None:
    """One place for Spark's PID defaults: the keys, the factory and the constructor agree."""
    from sluice.config import key

    built = estimators.create("pid", 1000)
    direct = PIDRateEstimator(1000)
    for name, attribute in (
        ("proportional", "proportional"),
        ("integral", "integral"),
        ("derived", "derivative"),
        ("min_rate", "min_rate"),
    ):
        default = key(f"estimator.pid.{name}").default
        assert getattr(built, attribute) == getattr(direct, attribute) == default
    assert (direct.proportional, direct.integral, direct.derivative, direct.min_rate) == (1.0, 0.2, 0.0, 100.0)
