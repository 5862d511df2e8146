"""Sources and block stores are registries like the estimators': built-ins and plugins alike.

The configuration takes its allowed values from the registries, and the receiver worker and the
block store opener build what they name, so a plugin needs no change to Sluice.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from sluice import estimators, plugins
from sluice.config import ConfigError, resolve
from sluice.receiver.sources.generator import GeneratorReceiver
from sluice.receiver.worker import make_receiver
from sluice.storage import Block, open_block_store, read_block
from tests.estimators.fixture_plugins import good_plugin

TICKS = """
    import pluggy
    from sluice.receiver import Receiver

    hookimpl = pluggy.HookimplMarker("sluice")

    class Ticks(Receiver):
        def __init__(self, options):
            super().__init__()
            self.options = options

        async def on_start(self):
            pass

    def factory(options):
        if "every_ms" not in options:
            raise ValueError("ticks needs the option every_ms")
        return Ticks(options)

    @hookimpl
    def sluice_register_sources():
        return {"ticks": factory, "not-a-receiver": lambda options: object()}
"""

MEMORY_STORE = """
    import pluggy
    from sluice.storage import Block, FileBlockStore

    hookimpl = pluggy.HookimplMarker("sluice")
    BLOCKS = {}

    class MemoryStore:
        def __init__(self, url):
            self.url = url

        def write(self, block):
            location = f"{self.url}/stream-{block.stream_id}/{block.block_id}"
            BLOCKS[location] = block
            return location

        def read(self, location):
            return BLOCKS[location]

    @hookimpl
    def sluice_register_block_stores():
        return {"mem": MemoryStore}
"""


def test_a_plugin_source_is_allowed_and_gets_the_source_options_table(install_plugin, tmp_path: Path) -> None:
    install_plugin("ticks", TICKS)
    toml = tmp_path / "sluice.toml"
    toml.write_text('[receiver]\nsource = "ticks"\n[receiver.source_options]\nevery_ms = 5\n[generator]\nrate = 9.0\n')
    config = resolve(["receiver", "generator"], config_file=str(toml), environ={})
    receiver = make_receiver(config, 0)
    assert type(receiver).__name__ == "Ticks" and getattr(receiver, "options", None) == {"every_ms": 5}


def test_a_builtin_source_gets_its_own_section(tmp_path: Path) -> None:
    toml = tmp_path / "sluice.toml"
    toml.write_text(
        '[receiver]\nsource = "generator"\n[receiver.source_options]\nrate = 1\n[generator]\nrate = 250.0\ntotal = 7\n'
    )
    receiver = make_receiver(resolve(["receiver", "generator"], config_file=str(toml), environ={}), 0)
    assert isinstance(receiver, GeneratorReceiver) and (receiver.rate, receiver.total) == (250.0, 7)


def test_a_source_factory_error_is_a_configuration_error(install_plugin) -> None:
    install_plugin("ticks", TICKS)
    config = resolve(["receiver"], flags={"receiver.source": "ticks"}, environ={})
    with pytest.raises(ConfigError, match=r"receiver.source = 'ticks': ticks needs the option every_ms"):
        make_receiver(config, 0)
    config = resolve(["receiver"], flags={"receiver.source": "not-a-receiver"}, environ={})
    with pytest.raises(plugins.PluginError, match=r"source 'not-a-receiver' of plugin 'ticks' .* built <object"):
        make_receiver(config, 0)


def test_unknown_source_lists_builtins_and_plugins(install_plugin) -> None:
    install_plugin("ticks", TICKS)
    with pytest.raises(
        ConfigError,
        match=r"receiver.source = 'tick' \(from flag --receiver-source\) is not "
        r"allowed: expected one of generator, kafka, not-a-receiver, socket, ticks",
    ):
        resolve(["receiver"], flags={"receiver.source": "tick"}, environ={})


def test_a_plugin_that_registers_only_a_source_is_no_estimator_failure(install_plugin) -> None:
    install_plugin("ticks", TICKS)
    assert "ticks" in plugins.registry("sluice_register_sources").available()
    assert not [f for f in estimators.plugin_failures() if f.plugin == "ticks"]
    assert "ticks" not in estimators.available()


def test_a_source_name_taken_twice_is_refused_naming_both(install_plugin) -> None:
    install_plugin(
        "kafka_again",
        """
        import pluggy
        @pluggy.HookimplMarker("sluice")
        def sluice_register_sources():
            return {"kafka": lambda options: None}
    """,
    )
    with pytest.raises(
        ConfigError,
        match=r"source 'kafka' is registered twice, by plugin 'sluice-sources' "
        r"\(built-in.*plugin 'kafka_again'",
    ):
        resolve(["receiver"], flags={"receiver.source": "kafka"}, environ={})
    assert resolve(["receiver"], flags={"receiver.source": "socket"}, environ={})["receiver.source"] == "socket"


def test_a_plugin_block_store_is_chosen_by_the_url_scheme(install_plugin) -> None:
    install_plugin("memory_store", MEMORY_STORE)
    url = resolve(["receiver"], flags={"receiver.block_store": "mem://pool"}, environ={})["receiver.block_store"]
    store = open_block_store(url)
    assert type(store).__name__ == "MemoryStore" and store.url == "mem://pool"
    location = store.write(Block(0, "b1", ["x"]))
    assert read_block(location).records == ["x"]  # a task finds the store from the location alone
    with pytest.raises(ConfigError, match=r"expected a URL whose scheme is one of .*\bfile, .*\bmem\b"):
        resolve(["receiver"], flags={"receiver.block_store": "s4://pool"}, environ={})


def test_resolving_the_receiver_configuration_imports_no_source() -> None:
    """Asking the source registry which names exist loads no source module (nor aiokafka)."""
    probe = (
        "import sys; from sluice.config import resolve; "
        "resolve(['receiver', 'kafka'], flags={'receiver.source': 'kafka'}, environ={}); "
        "loaded = [m for m in sys.modules if m.startswith(('aiokafka', 'sluice.receiver.sources.'))]; "
        "sys.exit(str(loaded) if loaded else 0)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


NO_METADATA_PROBE = """
    import importlib.metadata, pathlib, sys
    import sluice
    from sluice import estimators, plugins
    from sluice.storage import Block, open_block_store, read_block
    from sluice.storage.block_store import file_store_url

    assert pathlib.Path(sluice.__file__).parent.parent == pathlib.Path(sys.argv[1]), sluice.__file__
    dists = {d.metadata["Name"] for d in importlib.metadata.distributions()}
    assert "sluice-streaming" not in dists and "pluggy" in dists, sorted(dists)
    assert {"pid", "constant", "adaptive"} <= set(estimators.available()), estimators.available()
    assert {"generator", "kafka", "socket"} <= set(plugins.registry("sluice_register_sources").available())
    location = open_block_store(file_store_url(sys.argv[2])).write(Block(0, "b1", ["x"]))
    assert read_block(location).records == ["x"]
    assert not estimators.plugin_failures(), estimators.plugin_failures()
    print("ok")
"""


@pytest.mark.slow
def test_builtins_are_there_with_the_package_on_pythonpath_and_no_dist_info(tmp_path: Path) -> None:
    """As on an executor fed by ``--py-files``: the package is importable from ``PYTHONPATH`` alone
    and no ``sluice-streaming`` dist-info is on the path, yet the built-ins register.

    ``-S`` keeps the environment's site-packages (which holds Sluice's dist-info) off ``sys.path``;
    a directory of links to each of its entries but Sluice's own gives back the dependencies.
    """
    deps = tmp_path / "deps"
    deps.mkdir()
    for site in {Path(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")}:
        for entry in site.iterdir():
            if not entry.name.startswith(("sluice", "__editable__")) and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    package = tmp_path / "py-files"
    package.mkdir()
    (package / "sluice").symlink_to(Path(importlib.import_module("sluice").__file__).resolve().parent)
    (tmp_path / "blocks").mkdir()
    result = subprocess.run(
        [sys.executable, "-S", "-c", textwrap.dedent(NO_METADATA_PROBE), str(package), str(tmp_path / "blocks")],
        env={"PYTHONPATH": f"{package}:{deps}", "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_an_entry_point_named_like_a_builtin_is_ignored_and_reported(install_plugin) -> None:
    install_plugin("sluice-estimators", good_plugin())
    failures = {f.plugin: str(f) for f in estimators.plugin_failures()}
    assert (
        "entry point name already used by built-in, sluice.estimators.builtin; ignored" in failures["sluice-estimators"]
    )
    assert "fixed-step" not in estimators.available() and "pid" in estimators.available()


def test_metadata_naming_a_builtin_module_is_that_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older Sluice's dist-info listed its built-ins as entry points: the same modules, so no
    duplicate names and no failure."""
    info = tmp_path / "sluice_streaming-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sluice-streaming\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[sluice]\nsluice-estimators = sluice.estimators.builtin\nold-sources = sluice.receiver.sources\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    plugins.refresh()
    try:
        assert {"pid", "constant", "adaptive"} <= set(estimators.available())
        assert "kafka" in plugins.registry("sluice_register_sources").available()
        assert not estimators.plugin_failures()
    finally:
        plugins.refresh()
