"""MkDocs hooks: the pages whose content is generated when the site is built, never pasted.

A page asks for generated content with a marker comment on a line of its own:

* ``<!-- bench: NAME -->``: the figures of ``docs/benchmarks/NAME.jsonl``, the JSON lines
  ``bench/NAME.py`` printed (one object per figure, see ``bench/harness.py``), as a table of median,
  spread, peer and ratio; refreshing the page is re-running the bench into that file;
* ``<!-- public-api -->``: every package of ``sluice`` with an ``__all__``, and what each name is;
* ``<!-- include: PATH -->``: a file of the repository (the changelog lives at the root);
* ``<!-- test-times -->``: where the test suite's time goes, from ``docs/test-times.json``, which
  ``make test-times`` writes from the last ``make test``'s timings (``scripts/test_times.py``).

The renderers are plain functions of their input, so tests call them without MkDocs.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import pkgutil
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH_DATA = REPO / "docs" / "benchmarks"

MARKER = re.compile(r"^<!-- (bench: [\w-]+|public-api|test-times|include: [\w./-]+) -->$", re.M)
TEST_TIMES = REPO / "docs" / "test-times.json"

# Packages outside the supported surface: the demo is a program, not a library.
NOT_API = ("sluice.demo",)


# -- benchmarks --------------------------------------------------------------------------------


def number(value: Any) -> str:
    """A figure as a reader compares it: three significant digits, thousands separated."""
    if value is None:
        return "never"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{round(value):,}"
    if isinstance(value, int):
        return str(value)
    return f"{value:.3g}"


def spread(median: Any, low: Any, high: Any) -> str:
    """``median (min–max)``, or the median alone when every run gave the same value."""
    if low == high == median:
        return number(median)
    return f"{number(median)} ({number(low)}–{number(high)})"


def load_range(lines: Iterable[Mapping[str, Any]]) -> str:
    """The 1-minute load averages the lines were printed at, lowest–highest."""
    loads = [line["load_average"][0] for line in lines if "load_average" in line]
    if not loads:
        return "not recorded"
    low, high = min(loads), max(loads)
    return number(low) if low == high else f"{number(low)}–{number(high)}"


def series_table(lines: Sequence[Mapping[str, Any]]) -> str:
    """Figures of one series each: median (min–max), rounds, the peer's from the same rounds, ratio."""
    rows = ["| figure | ours: median (min–max) | rounds | peer, same rounds: median (min–max) | ratio | target |"]
    rows.append("|---|---|---|---|---|---|")
    for line in lines:
        unit = f" {line['unit']}" if line.get("unit") else ""
        peer = line.get("peer")
        peer_cell = f"{peer['name']}: {spread(peer['median'], peer['min'], peer['max'])}" if peer else "–"
        ratio = number(line["ratio"]) if "ratio" in line else "–"
        target = "–"
        if "target" in line:
            target = f"{line['target']}: {'met' if line['met'] else '**missed**'}"
        ours = spread(line["median"], line["min"], line["max"]) + unit
        rows.append(f"| {line['figure']} | {ours} | {len(line['runs'])} | {peer_cell} | {ratio} | {target} |")
    return "\n".join(rows)


def fields_table(lines: Sequence[Mapping[str, Any]]) -> str:
    """Figures made of several fields: one column per field, a row for the ratio against the peer."""
    fields = list(dict.fromkeys(f for line in lines for f in line["median"]))
    rows = ["| figure | runs | " + " | ".join(f.replace("_", " ") for f in fields) + " |"]
    rows.append("|---|---|" + "---|" * len(fields))
    for line in lines:
        cells = [spread(line["median"].get(f), line["min"].get(f), line["max"].get(f)) for f in fields]
        rows.append(f"| {line['figure']} | {len(line['runs'])} | " + " | ".join(cells) + " |")
        if "ratio" in line:
            ratios = [number(line["ratio"].get(f)) if line["ratio"].get(f) is not None else "–" for f in fields]
            rows.append(f"| ↳ ratio to {line['peer']['name']} | | " + " | ".join(ratios) + " |")
    return "\n".join(rows)


def summary_list(lines: Sequence[Mapping[str, Any]]) -> str:
    """A bench's summary lines (no ``figure``): each value by its key."""
    items = []
    for line in lines:
        for key, value in line.items():
            if key not in ("bench", "load_average"):
                shown = value if isinstance(value, str) else json.dumps(value)
                items.append(f"- `{key}`: {shown}")
    return "\n".join(items)


def render_bench(lines: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown of one bench's JSON lines: its tables, then the load they were measured at."""
    if not lines:
        raise ValueError("a bench's data file holds no JSON line")
    series = [line for line in lines if "figure" in line and not isinstance(line["median"], dict)]
    fields = [line for line in lines if "figure" in line and isinstance(line["median"], dict)]
    summaries = [line for line in lines if "figure" not in line]
    parts = [table(group) for table, group in ((series_table, series), (fields_table, fields)) if group]
    if summaries:
        parts.append(summary_list(summaries))
    parts.append(f"Load average (1 minute) while these figures were printed: {load_range(lines)}.")
    return "\n\n".join(parts)


def read_lines(path: Path) -> list[dict[str, Any]]:
    """A bench's stdout as committed: one JSON object per non-empty line."""
    return [json.loads(text) for text in path.read_text().splitlines() if text.strip()]


# -- public API --------------------------------------------------------------------------------


def api_modules(root: str = "sluice") -> list[ModuleType]:
    """``root`` and its packages, plus its top-level modules, that declare ``__all__`` (sorted)."""
    package = importlib.import_module(root)
    found = [package] if hasattr(package, "__all__") else []
    for info in pkgutil.walk_packages(package.__path__, f"{root}."):
        top_level = info.name.count(".") == 1
        private = any(part.startswith("_") for part in info.name.split("."))
        if private or info.name.startswith(NOT_API) or not (info.ispkg or top_level):
            continue
        module = importlib.import_module(info.name)
        if hasattr(module, "__all__"):
            found.append(module)
    return sorted(found, key=lambda m: m.__name__)


def first_line(obj: Any) -> str:
    """The first paragraph of ``obj``'s docstring on one line ("" for a dataclass's generated one)."""
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):
        return ""
    return doc.strip().split("\n\n")[0].replace("\n", " ").replace("|", "\\|")


def kind(obj: Any) -> str:
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "function"
    if inspect.ismodule(obj):
        return "module"
    return f"constant ({type(obj).__name__})"


def render_api(modules: Iterable[ModuleType]) -> str:
    """One section per module: its summary, then each name of its ``__all__`` with its kind and summary."""
    parts = []
    for module in modules:
        rows = ["| name | kind | what it is |", "|---|---|---|"]
        for name in module.__all__:
            obj = getattr(module, name)
            summary = "" if kind(obj).startswith("constant") else first_line(obj)
            rows.append(f"| `{name}` | {kind(obj)} | {summary} |")
        parts.append(f"## `{module.__name__}`\n\n{first_line(module)}\n\n" + "\n".join(rows))
    return "\n\n".join(parts)


# -- the hook ----------------------------------------------------------------------------------


def render_test_times(path: Path) -> str:
    """The table of scripts/test_times.py (a script beside this one, not a package) from its summary."""
    spec = importlib.util.spec_from_file_location("test_times", REPO / "scripts" / "test_times.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    summary = json.loads(path.read_text())
    if not summary:
        raise ValueError(f"{path.name} holds no tier")
    return str(module.render(summary))


def expand(marker: str) -> str:
    if marker == "public-api":
        return render_api(api_modules())
    if marker == "test-times":
        return render_test_times(TEST_TIMES)
    what, _, arg = marker.partition(": ")
    if what == "bench":
        return render_bench(read_lines(BENCH_DATA / f"{arg}.jsonl"))
    return (REPO / arg).read_text()


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs' hook: every marker of the page replaced by what it asks for; a marker that cannot be
    filled (a missing or empty data file) fails the build with one line naming the page and why."""
    from mkdocs.exceptions import PluginError

    try:
        return MARKER.sub(lambda m: expand(m.group(1)), markdown)
    except (OSError, ValueError) as exc:
        raise PluginError(f"{page.file.src_path}: cannot fill a generated section: {exc}") from None
