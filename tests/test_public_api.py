"""A package's ``__all__`` is its supported API: every name in it imports, and a type checker sees
what it really is (the lazy exports of the service packages included), never ``Any``."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def public_packages() -> list[ModuleType]:
    """Every package of ``sluice`` that states its API with ``__all__`` (the service folders included)."""
    walked = os.walk(REPO / "sluice", followlinks=True)  # sluice/<folder> links to the service folders
    names = sorted(".".join(Path(d).relative_to(REPO).parts) for d, _, files in walked if "__init__.py" in files)
    found = [importlib.import_module(n) for n in names]
    return [m for m in found if hasattr(m, "__all__")]


def test_the_service_packages_state_their_api() -> None:
    stated = {m.__name__ for m in public_packages()}
    assert {"sluice.receiver", "sluice.tracker", "sluice.spark_driver", "sluice.spark_driver.direct"} <= stated


@pytest.mark.parametrize("package", public_packages(), ids=lambda m: m.__name__)
def test_every_name_in_all_imports(package: ModuleType) -> None:
    assert len(set(package.__all__)) == len(package.__all__), "a name is listed twice"
    for name in package.__all__:
        assert getattr(package, name) is not None
    with pytest.raises(AttributeError, match=f"module '{package.__name__}' has no attribute 'NoSuchName'"):
        package.NoSuchName  # noqa: B018 - the lookup is the test


@pytest.mark.slow
def test_mypy_sees_every_exported_name_as_what_it_is(tmp_path: Path) -> None:
    """``reveal_type`` of every ``__all__`` name: none may be ``Any``, and a call of a method the
    class does not have (or a name the package does not export) is a type error."""
    packages = public_packages()
    lines = [f"import {m.__name__}" for m in packages]
    revealed_at: dict[int, str] = {}
    for m in packages:
        for name in m.__all__:
            lines.append(f"reveal_type({m.__name__}.{name})")
            revealed_at[len(lines)] = f"{m.__name__}.{name}"
    lines.append("sluice.spark_driver.StreamingDriver(tracker='127.0.0.1:7100').no_such_method()")
    no_method = len(lines)
    lines.append("sluice.tracker.TrackerClient.no_such_method")
    no_client_method = len(lines)
    lines.append("sluice.receiver.NoSuchName")
    no_name = len(lines)
    snippet = tmp_path / "uses_the_api.py"
    snippet.write_text("\n".join(lines) + "\n")

    # from the repository root: its configuration, its ``sluice``, and the cache ``mypy -p sluice`` left
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", str(snippet)], cwd=REPO, capture_output=True, text=True
    )
    found = re.findall(r"^.*uses_the_api\.py:(\d+): (\w+): (.*)$", result.stdout, re.MULTILINE)
    assert found, result.stdout + result.stderr
    revealed = {int(n): text for n, kind, text in found if kind == "note" and text.startswith("Revealed type is")}
    assert set(revealed) == set(revealed_at), result.stdout
    untyped = [revealed_at[n] for n, text in revealed.items() if text == 'Revealed type is "Any"']
    assert not untyped, f"typed as Any: {untyped}"
    errors = {int(n): text for n, kind, text in found if kind == "error"}
    assert set(errors) == {no_method, no_client_method, no_name}, result.stdout
    assert '"StreamingDriver" has no attribute "no_such_method"' in errors[no_method]
    assert '"type[TrackerClient]" has no attribute "no_such_method"' in errors[no_client_method]
    assert 'Module has no attribute "NoSuchName"' in errors[no_name]
