"""Looking at other processes from a test: what they serve on their metrics port, and what is left of
them after a test stopped them (``/proc``)."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path


def metric_value(port: int, name: str, **labels: str) -> float | None:
    """The sample ``name{labels}`` a service serves on its Prometheus port (summed over the labels not
    given); None while nothing answers there or the sample does not exist yet."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    values = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(values) if values else None


def leftover_processes(marker: str) -> list[str]:
    """Command lines of live processes whose command line or environment contains ``marker`` (a port,
    a temporary directory, a variable only a test's processes carry): what a test failed to stop."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if marker.encode() in cmdline or marker.encode() in environ:
            found.append(cmdline.replace(b"\0", b" ").decode(errors="replace").strip())
    return found
