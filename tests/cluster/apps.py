"""The batch function the cluster tests run with ``--app tests.cluster.apps:write_values``.

Configured through the environment: ``SLUICE_TEST_OUT`` (output directory) and
``SLUICE_TEST_CONTROL`` (a directory of control files the test and the app share):

* each row written is ``(value, worker, sluice)``: the record's ``<receiver>:<seq>``, the
  ``SLUICE_TEST_WORKER`` of the executor that read the block (``driver`` if none) and the file
  Sluice was imported from there;
* while ``gate-tasks`` exists, a task touches ``task-<worker>-<pid>`` and waits for the gate to go
  (the test kills a worker there, mid-batch);
* after writing a batch with records, ``marks/<batch>.<records>`` is touched; then, while
  ``hold-driver`` exists, the function touches ``held-<batch>`` and waits (the test kills the
  driver there: output written, completion not reported).

The task-side code is a closure, so cloudpickle ships it by value: executors do not have the tests
package (a user's app ships its own modules with ``--py-files`` or in the packed environment).
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def write_values(batch) -> None:
    if batch.is_empty:  # no job for an idle tick: each one costs seconds on a loaded 2-core cluster
        return
    control = Path(os.environ["SLUICE_TEST_CONTROL"])

    def rows(records):
        gate = control / "gate-tasks"
        worker = os.environ.get("SLUICE_TEST_WORKER", "driver")
        if gate.exists():
            (control / f"task-{worker}-{os.getpid()}").touch()
            deadline = time.monotonic() + 120
            while gate.exists() and time.monotonic() < deadline:  # the test, another process, lifts it
                time.sleep(0.1)
        import sluice

        for record in records:
            yield record.split(" ", 1)[0], worker, sluice.__file__

    df = batch.spark.createDataFrame(batch.rdd.mapPartitions(rows), "value string, worker string, sluice string")
    batch.write_json(os.environ["SLUICE_TEST_OUT"], df)
    marks = control / "marks"
    marks.mkdir(exist_ok=True)
    (marks / f"{batch.time_ms}.{batch.num_records}").touch()
    deadline = time.monotonic() + 120
    while (control / "hold-driver").exists() and time.monotonic() < deadline:  # lifted by the test process
        (control / f"held-{batch.time_ms}").touch()
        time.sleep(0.1)


def marked_records(control: Path) -> int:
    """Records of the batches that finished writing (a batch written twice counts once)."""
    marks = control / "marks"
    return sum(int(p.name.split(".")[1]) for p in marks.iterdir()) if marks.exists() else 0
