"""MkDocs hooks: the pages whose content is generated when the site is built, never pasted.

A page asks for generated content with a marker comment on a line of its own:

* ``<!-- bench: NAME -->``: the figures of ``docs/benchmarks/NAME.jsonl``, the JSON lines
  ``bench/NAME.py`` printed (one object per figure, see ``bench/harness.py``), as a table of median,
  spread, peer and ratio; refreshing the page is re-running the bench into that file;
* ``<!-- campaigns: chaos -->``: the fault campaigns' table, a row per run of ``bench/chaos.py``;
* ``<!-- verdicts: arena -->``: the arena's medians of ``adaptive`` against the PID and its verdicts;
* ``<!-- public-api -->``: every package of ``sluice`` with an ``__all__``, and what each name is;
* ``<!-- errors -->``: every exception class of ``sluice``, found by walking the package, with its
  builtin base, its ``retriable`` flag and its docstring's first line;
* ``<!-- include: PATH -->``: a file of the repository (the changelog lives at the root);
* ``<!-- test-times -->``: where the test suite's time goes, from ``docs/test-times.json``, which
  ``make test-times`` writes from the last ``make test``'s timings (``scripts/test_times.py``).

Prose that quotes a bench's figure asks for it inline, so a new run of the bench changes the
sentence with the table: ``{{ figure peers "light: records/s, sluice-direct" }}`` is that line's
median; ``{{ figure peers "heavy: p50 latency at 50%, sluice-*" | s }}`` the lowest–highest of the
lines the glob matches, in seconds; ``{{ figure control "step / adaptive" median.batches_to_steady
}}`` a field of a nested map. :func:`render_figure` has the filters. A figure the file does not
have fails the build, naming the page, the marker and the lines (or fields) the file has.

The renderers are plain functions of their input, so tests call them without MkDocs.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import inspect
import json
import math
import pkgutil
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH_DATA = REPO / "docs" / "benchmarks"

MARKER = re.compile(
    r"^<!-- ((?:bench|campaigns|verdicts): [\w-]+|public-api|errors|test-times|include: [\w./-]+) -->$", re.M
)
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


# -- figures in prose --------------------------------------------------------------------------


FIGURE = re.compile(r"\{\{\s*figure\s+(.+?)\s*\}\}", re.S)  # a marker may wrap, as prose does
TOKEN = re.compile(r'"([^"]*)"|(\S+)')


class FigureError(ValueError):
    """A ``{{ figure ... }}`` marker names a line, a field or a filter its data file does not have."""


def significant(value: float, digits: int) -> str:
    """``value`` to ``digits`` significant digits, never in exponent form, thousands separated."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{round(value, decimals):,.{decimals}f}"


def seconds(ms: float) -> str:
    """Milliseconds as seconds to two significant digits, the way prose states a latency."""
    return significant(ms / 1000, 2)


def times(value: float) -> str:
    """A ratio to two significant digits: 1.824 reads "1.8", 0.917 "0.92"."""
    return significant(value, 2)


def percent(value: float) -> str:
    """A share (0.63) as a percentage to two significant digits, without the sign."""
    return significant(value * 100, 2)


def whole(value: float) -> str:
    """A count or a rate as a whole number, thousands separated."""
    return f"{round(value):,}"


# what ``| NAME`` does to each value; a unit the prose writes after the marker, once
FORMATS = {"number": number, "s": seconds, "times": times, "percent": percent, "int": whole}
REDUCERS = {"min": min, "max": max}


def numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def line_key(line: Mapping[str, Any]) -> str | None:
    """What a marker selects a line by: its ``figure``, or a summary line's ``name``."""
    return line.get("figure", line.get("name"))


def field(line: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` of a line (``median``, ``peer.median``, ``median.peak``)."""
    value: Any = line
    for i, part in enumerate(path.split(".")):
        if not isinstance(value, Mapping) or part not in value:
            where = ".".join(path.split(".")[:i]) or "the line"
            shown = ", ".join(value) if isinstance(value, Mapping) else f"a {type(value).__name__}"
            raise FigureError(f"{line_key(line)!r} has no field {path!r}: {where} holds {shown}")
        value = value[part]
    return value


def render_figure(spec: str, lines: Sequence[Mapping[str, Any]]) -> str:
    """One ``{{ figure BENCH "LINE" ["LINE" ...] [FIELD] [| FILTER ...] }}``, BENCH already read.

    Each ``"LINE"`` is a glob on the lines' ``figure`` (or ``name``); every line any of them
    matches gives its ``FIELD`` (``median`` by default, dotted into a nested map). ``| min`` and
    ``| max`` reduce the values to one; several values left render as ``lowest–highest``; the last
    filter may be a format (``number``, the default, ``s`` for ms as seconds, ``times``,
    ``percent``, ``int``)."""
    tokens = TOKEN.findall(spec)
    bench = tokens[0][1]
    selectors = [quoted for quoted, bare in tokens[1:] if not bare]
    rest = [bare for _, bare in tokens[1 + len(selectors) :]]
    if not selectors or not all(rest):
        raise FigureError(f"{bench}: name the lines first, each in double quotes, then a field and filters")
    head, *filters = " ".join(rest).split("|")
    path = head.strip() or "median"
    keys = [key for key in map(line_key, lines) if key is not None]
    chosen = []
    for selector in selectors:
        matched = [line for line in lines if fnmatch.fnmatchcase(line_key(line) or "", selector)]
        if not matched:
            raise FigureError(f"{bench} has no line {selector!r}; its lines are: " + "; ".join(keys))
        chosen += [line for line in matched if line not in chosen]
    values = [field(line, path) for line in chosen]
    shown: Callable[[Any], str] = number
    for name in (f.strip() for f in filters):
        if name in REDUCERS:
            values = [REDUCERS[name](values)]
        elif name in FORMATS:
            shown = FORMATS[name]
        else:
            raise FigureError(f"no filter {name!r}: the filters are " + ", ".join([*REDUCERS, *FORMATS]))
    if len(values) == 1 or not all(map(numeric, values)):
        if len(values) > 1:
            raise FigureError(f"{len(values)} lines give {path!r}, not all numbers: name one line")
        return shown(values[0]) if numeric(values[0]) else number(values[0])
    low, high = shown(min(values)), shown(max(values))
    return low if low == high else f"{low}–{high}"  # one figure where the rounding meets


def expand_figures(markdown: str) -> str:
    """Every ``{{ figure ... }}`` of a page replaced by the value it names; an error names the marker."""

    def one(match: re.Match[str]) -> str:
        spec = " ".join(match.group(1).split())  # a line break and its indent are one space
        try:
            return render_figure(spec, read_lines(BENCH_DATA / f"{spec.split()[0]}.jsonl"))
        except (FigureError, OSError) as exc:
            raise FigureError(f"{{{{ figure {spec} }}}}: {exc}") from None

    return FIGURE.sub(one, markdown)


def render_campaigns(lines: Sequence[Mapping[str, Any]]) -> str:
    """The fault campaigns' table: a row per run of ``bench/chaos.py``, its length, faults, bursts,
    records, recovery after each burst and after every healing, RSS growth and block files left."""
    rows = [
        "| seed | length | faults | bursts | records | recovery p50 / p99 | every healing p50 / p99 "
        "| RSS growth | block files left |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in lines:
        rss = "not judged" if f["rss_growth"] is None else f"{f['rss_growth']} %"
        rows.append(
            f"| {f['seed']} | {f['seconds'] // 60} min | {f['faults']} | {f['bursts']} | {f['records']:,} "
            f"| {f['recovery_p50_s']} / {f['recovery_p99_s']} s "
            f"| {f['recovery_each_healing_p50_s']} / {f['recovery_each_healing_p99_s']} s | {rss} "
            f"| {f['blocks_left']} |"
        )
    return "\n".join(rows)


def render_verdicts(lines: Sequence[Mapping[str, Any]]) -> str:
    """The arena's judgement of ``adaptive``: per scenario the medians of ``adaptive`` / PID on each
    judged figure and the verdict on each (``sluice.testing.arena.metrics.verdict``, its ties)."""
    from sluice.testing.arena.metrics import TIES, verdict

    def cell(value: float | None, digits: int | None = None) -> str:
        if value is None:
            return "never"
        if digits is not None:
            return f"{value:.{digits}f}"
        return str(int(value)) if float(value).is_integer() else f"{value:g}"

    figures = (
        ("batches to steady", "batches_to_steady", None),
        ("peak delay (intervals)", "peak_scheduling_delay_intervals", 2),
        ("batches at min rate", "batches_at_min_rate", None),
        ("steady utilization", "steady_utilization", 3),
    )
    rows = ["| scenario | " + " | ".join(title for title, _, _ in figures) + " | verdict |"]
    rows.append("|---|" + "---|" * (len(figures) + 1))
    for line in lines:
        if not line["figure"].endswith("/ adaptive"):
            continue
        ours, pid = line["median"], line["peer"]["median"]
        cells = [f"{cell(ours[key], digits)} / {cell(pid[key], digits)}" for _, key, digits in figures]
        judged = verdict(ours, pid)
        scenario = line["figure"].split(" / ")[0]
        rows.append(f"| `{scenario}` | " + " | ".join(cells) + f" | {', '.join(judged[n] for n in TIES)} |")
    return "\n".join(rows)


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


# -- errors ------------------------------------------------------------------------------------


def error_classes(root: str = "sluice") -> list[type[Exception]]:
    """Every ``Exception`` subclass defined in a module of ``root`` (the demo and the test helpers
    too: they raise to their users as well), by module, then by name."""
    package = importlib.import_module(root)
    found = []
    for info in pkgutil.walk_packages(package.__path__, f"{root}."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == info.name:
                found.append(value)
    return sorted(found, key=lambda cls: (cls.__module__, cls.__qualname__))


def builtin_base(cls: type) -> type:
    """The builtin exception an error still is, so code that catches builtins keeps catching it."""
    return next(base for base in cls.__mro__ if base.__module__ == "builtins")


def retriable(cls: type) -> str:
    """``True`` or ``False`` from the class; "per instance" for a class whose constructor sets it
    (a tracker's ``error`` reply decides by its code)."""
    try:
        decides = "self.retriable =" in inspect.getsource(cls)
    except (OSError, TypeError):
        decides = False
    return "per instance" if decides else str(getattr(cls, "retriable", "–"))


def render_errors(classes: Iterable[type[Exception]]) -> str:
    """The errors table: each class, where it lives, the builtin it still is, whether retrying can
    help, and when it is raised (its docstring's first paragraph)."""
    rows = ["| class | module | builtin base | retriable | raised when |", "|---|---|---|---|---|"]
    for cls in classes:
        rows.append(
            f"| `{cls.__qualname__}` | `{cls.__module__}` | `{builtin_base(cls).__name__}` "
            f"| {retriable(cls)} | {first_line(cls)} |"
        )
    return "\n".join(rows)


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
    if marker == "errors":
        return render_errors(error_classes())
    if marker == "test-times":
        return render_test_times(TEST_TIMES)
    what, _, arg = marker.partition(": ")
    renderers = {"bench": render_bench, "campaigns": render_campaigns, "verdicts": render_verdicts}
    if what in renderers:
        return renderers[what](read_lines(BENCH_DATA / f"{arg}.jsonl"))
    return (REPO / arg).read_text()


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs' hook: every marker of the page replaced by what it asks for; a marker that cannot be
    filled (a missing or empty data file, a figure the file does not have) fails the build with one
    line naming the page and why."""
    from mkdocs.exceptions import PluginError

    try:
        return expand_figures(MARKER.sub(lambda m: expand(m.group(1)), markdown))
    except (OSError, ValueError) as exc:
        raise PluginError(f"{page.file.src_path}: cannot fill a generated section: {exc}") from None
