"""Fixture plugin distributions: real dist-info directories on ``sys.path``.

``importlib.metadata`` finds a ``<name>-<version>.dist-info`` directory with ``METADATA`` and
``entry_points.txt`` on any ``sys.path`` entry exactly as it finds what pip installed, so these
plugins travel the same road as a ``pip install``-ed one: no hook is monkeypatched.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def install_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """``install_plugin(ep_name, source, dist=None) -> module name``: writes a module and a
    distribution whose ``sluice`` entry point ``ep_name`` names it, on a fresh ``sys.path`` entry."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    modules: list[str] = []

    def install(ep_name: str, source: str, dist: str | None = None) -> str:
        module = f"sluice_fixture_{ep_name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        dist = dist or f"sluice-fixture-{ep_name}"
        (site / f"{module}.py").write_text(textwrap.dedent(source))
        info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[sluice]\n{ep_name} = {module}\n")
        importlib.invalidate_caches()
        modules.append(module)
        return module

    yield install
    for module in modules:
        sys.modules.pop(module, None)
