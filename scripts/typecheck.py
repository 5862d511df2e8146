#!/usr/bin/env python3
"""Run mypy over the package as it is installed: ``sluice`` with the card's folders mapped into it.

mypy cannot follow the import hook of setuptools' editable install (which maps ``sluice.receiver``
to ``receiver/`` and so on), so this lays the installed layout out as symlinks in a temporary
directory, runs mypy there with the ``[tool.mypy]`` settings of pyproject.toml, and prints the
paths as they are in the repository.  ``make test`` runs it before the suite.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def layout(root: Path) -> dict[str, str]:
    """Symlink the installed ``sluice`` package under ``root``; return {path there: path here}."""
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    package = root / "sluice"
    package.mkdir()
    for entry in (REPO / "sluice").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    renames = {f"{package}/": "sluice/"}
    for name, folder in mapping.items():
        sub = name.removeprefix("sluice.")
        (package / sub).symlink_to(REPO / folder)
        renames[f"sluice/{sub}/"] = f"{folder}/"
    return renames


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="sluice-mypy-") as tmp:
        renames = layout(Path(tmp))
        result = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), "-p", "sluice"],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
    for line in (result.stdout + result.stderr).splitlines():
        for there, here in renames.items():
            if line.startswith(there):
                line = here + line[len(there) :]
        print(line)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
