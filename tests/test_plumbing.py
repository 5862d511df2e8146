"""Test plumbing has one home: certificates come from :mod:`sluice.embedded.certs`, not from
``openssl`` command lines copied into tests and benches.

A copy drifts (one makes RSA keys with no extensions, another EC keys with SANs) and each copy
is one more place to fix when a TLS check tightens; the helper is the only place that runs
``openssl``.  The scan reads the source with :mod:`ast`, so a comment or a docstring that names
the tool is no call.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOL = "openssl"


def _argv_head(node: ast.AST) -> ast.expr | None:
    """The expression that names the program: a list's or tuple's first element, a call's first
    argument (``subprocess.run("openssl req ...", shell=True)``)."""
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        return node.elts[0]
    if isinstance(node, ast.Call) and node.args:
        return node.args[0]
    return None


def openssl_calls(root: Path) -> Iterator[str]:
    """``path:line`` of every command line under ``root`` whose program is ``openssl``."""
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        if TOOL not in text:  # parse only the files that could hold one
            continue
        heads = []
        for node in ast.walk(ast.parse(text, str(path))):
            head = _argv_head(node)
            if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.split(" ", 1)[0] == TOOL:
                heads.append(head.lineno)
        yield from (f"{path.relative_to(root)}:{line}" for line in sorted(set(heads)))


def test_no_test_or_bench_runs_openssl_itself() -> None:
    calls = [f"{d}/{c}" for d in ("tests", "bench") for c in openssl_calls(REPO / d)]
    assert calls == [], f"make certificates with sluice.embedded.certs, not openssl directly: {calls}"


def test_the_scan_finds_a_copied_command_line_and_ignores_prose(tmp_path: Path) -> None:
    (tmp_path / "copied.py").write_text(
        '"""Certificates openssl makes."""\nimport subprocess\n'
        'subprocess.run(["openssl", "req", "-x509"], check=True)\n'
        'subprocess.run("openssl genrsa 2048", shell=True)\n'
    )
    assert list(openssl_calls(tmp_path)) == ["copied.py:3", "copied.py:4"]
