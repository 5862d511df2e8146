"""Paths and tool lookups shared by the deploy tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def need_tool(name: str, why: str) -> str:
    """The tool's path, or fail naming the missing tool and how a fresh machine gets it
    (``make test`` installs it: scripts/system-deps.sh)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed ({why}; `make system-deps` installs it)")
    return path
