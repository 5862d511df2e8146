"""The documentation holds what it promises: the README opens with the two commands and its links
resolve, every alert has a runbook section its ``runbook_url`` points at, the benchmarks page is
rendered from the benches' own JSON lines, and the public API page lists every ``__all__``.
``mkdocs build --strict`` (``make docs``, run by ``make test``) checks the site's own links."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, REPO
from tests.deploy.test_benchmarks import check_line

sys.path.insert(0, str(REPO / "scripts"))
import docs_hooks

DOCS = REPO / "docs"
RUNBOOK = DOCS / "operations" / "runbook.md"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def sections(markdown: str, level: str = "##") -> list[str]:
    return re.findall(rf"^{level} (.+)$", markdown, re.M)


def alerts() -> dict[str, dict]:
    groups = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


class Page:
    class file:  # the attribute MkDocs' page has
        src_path = "guide/some-page.md"


def test_the_readme_opens_with_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert sections(readme)[0] == "Two commands"
    first = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^make demo\b", first, re.M) and re.search(r"^make test\b", first, re.M)


@pytest.mark.parametrize("name", ["README.md", "CHANGELOG.md"])
def test_relative_links_outside_the_site_resolve(name: str) -> None:
    """MkDocs checks the links of docs/; these two files live beside it, read on the forge."""
    text = (REPO / name).read_text()
    targets = [t for t in LINK.findall(text) if "://" not in t]
    missing = [t for t in targets if not (REPO / t).exists()]
    assert not missing, f"{name} links to files that do not exist: {missing}"


def test_every_alert_has_a_runbook_section_its_runbook_url_points_at() -> None:
    headings = sections(RUNBOOK.read_text())
    rules = alerts()
    assert rules and sorted(rules) == sorted(headings), "one runbook section per alert, named as the alert"
    for name, rule in rules.items():
        url = rule["annotations"].get("runbook_url")
        # MkDocs' anchor of a heading that is one CamelCase word is the word in lower case
        assert url == f"docs/operations/runbook.md#{name.lower()}", f"{name}: runbook_url is {url!r}"


def test_every_runbook_section_says_what_it_means_and_what_to_do() -> None:
    text = RUNBOOK.read_text()
    for name in alerts():
        body = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert "**What it means.**" in body and "**What to do.**" in body, name


def test_the_benchmark_data_are_the_benches_own_lines_and_each_is_on_the_page() -> None:
    page = (DOCS / "benchmarks" / "index.md").read_text()
    marked = set(re.findall(r"^<!-- bench: ([\w-]+) -->$", page, re.M))
    files = {p.stem: p for p in (DOCS / "benchmarks").glob("*.jsonl")}
    assert marked and marked == set(files), "every data file on the page, every marker with its data file"
    for name, path in files.items():
        bench = name.split("--")[0]  # NAME--VARIANT: another run of NAME's bench, other arguments
        assert (REPO / "bench" / f"{bench}.py").exists(), f"{path.name} names no bench"
        lines = docs_hooks.read_lines(path)
        assert any("figure" in line for line in lines), path
        for line in lines:
            check_line(line, f"{bench}.py")


def test_a_series_renders_median_spread_rounds_peer_ratio_and_target() -> None:
    line = {
        "bench": "x",
        "figure": "acks",
        "unit": "acks/s",
        "median": 21000.0,
        "min": 19500.4,
        "max": 23999.6,
        "runs": [19500.4, 21000.0, 23999.6],
        "peer": {"name": "one fsync per record", "median": 7000.0, "min": 6000.0, "max": 8000.0},
        "ratio": 3.0,
        "target": "median >= 20000",
        "met": True,
        "load_average": [1.5, 1.0, 0.5],
    }
    text = docs_hooks.render_bench([line])
    row = next(r for r in text.splitlines() if r.startswith("| acks "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == [
        "acks",
        "21,000 (19,500–24,000) acks/s",
        "3",
        "one fsync per record: 7,000 (6,000–8,000)",
        "3",
        "median >= 20000: met",
    ]
    assert "Load average (1 minute) while these figures were printed: 1.5." in text


def test_fields_render_per_field_with_never_and_the_ratio_row() -> None:
    line = {
        "bench": "arena",
        "figure": "gc_cliff / adaptive",
        "median": {"batches_to_steady": 12, "peak": 1.86},
        "min": {"batches_to_steady": 10, "peak": 1.5},
        "max": {"batches_to_steady": None, "peak": 2.25},
        "runs": [{}, {}, {}],
        "peer": {"name": "pid", "median": {"batches_to_steady": None, "peak": 2.5}},
        "ratio": {"batches_to_steady": None, "peak": 0.744},
        "load_average": [0.5, 0.5, 0.5],
    }
    rows = docs_hooks.render_bench([line]).splitlines()
    assert "| gc_cliff / adaptive | 3 | 12 (10–never) | 1.86 (1.5–2.25) |" in rows
    assert "| ↳ ratio to pid | | – | 0.744 |" in rows


def test_a_missing_or_empty_data_file_fails_the_build_naming_the_page(tmp_path: Path, monkeypatch) -> None:
    from mkdocs.exceptions import PluginError

    monkeypatch.setattr(docs_hooks, "BENCH_DATA", tmp_path)
    with pytest.raises(PluginError, match=r"guide/some-page\.md: .*nothing\.jsonl"):
        docs_hooks.on_page_markdown("<!-- bench: nothing -->\n", page=Page)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(PluginError, match="holds no JSON line"):
        docs_hooks.on_page_markdown("<!-- bench: empty -->\n", page=Page)


def test_the_api_page_lists_every_name_of_every_package_all() -> None:
    modules = docs_hooks.api_modules()
    names = {m.__name__ for m in modules}
    assert {"sluice.receiver", "sluice.tracker", "sluice.estimators", "sluice.spark_driver"} <= names
    assert not any(n.startswith("sluice.demo") for n in names)
    page = docs_hooks.render_api(modules)
    for module in modules:
        section = page.split(f"## `{module.__name__}`\n", 1)[1].split("\n## ", 1)[0]
        for name in module.__all__:
            assert f"| `{name}` |" in section, f"{module.__name__}.{name} missing from the API page"


def test_the_changelog_page_is_the_root_changelog() -> None:
    markdown = (DOCS / "reference" / "changelog.md").read_text()
    assert docs_hooks.on_page_markdown(markdown, page=None).strip() == (REPO / "CHANGELOG.md").read_text().strip()


# an issue, a post or a session no reader can open; a date or a commit of a pasted measurement
HISTORY = re.compile(
    r"\bissue \d|\bseeds?[ _]0\d\d|\bthe card\b|\bthis session\b|\b20\d\d-\d\d-\d\d\b|\bcommit [0-9a-f]{7}", re.I
)


def test_the_docs_state_arguments_not_work_history() -> None:
    """No pointer a reader cannot follow (an issue, a post, a session) and no dated log in the docs."""
    files = [REPO / "README.md", REPO / "CHANGELOG.md", *DOCS.rglob("*.md")]
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in files for m in HISTORY.finditer(p.read_text())]
    assert not found, found


def test_the_code_names_no_pointer_a_reader_cannot_follow() -> None:
    """Nor do the sources and tests (a test named after a case no reader can open)."""
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    pointer = re.compile(r"\bissue \d|(?:\b|_)seeds?[ _]0\d\d|\bthe card\b|\bthis session\b", re.I)
    found = [
        f"{name}: {m.group(0)}"
        for name in tracked.stdout.split()
        for m in pointer.finditer((REPO / name).read_text(errors="replace"))
    ]
    assert not found, found


def test_the_site_is_built_strictly_from_the_docs_folder() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["strict"] is True and config["docs_dir"] == "docs"
    assert config["site_dir"] + "/" in (REPO / ".gitignore").read_text().splitlines()
    assert "tutorial.md" in json.dumps(config["nav"])


def _figures(name: str) -> list[dict]:
    return docs_hooks.read_lines(DOCS / "benchmarks" / f"{name}.jsonl")


def _write(tmp_path: Path, name: str, lines: list[dict]) -> None:
    (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


LINES: list[dict] = [
    {"figure": "light: p50 latency, a", "median": 1372.9, "min": 1300.0, "max": 1401.0, "ratio": 1.824},
    {"figure": "light: p50 latency, b", "median": 2387.4, "offered_rate": 220883, "peer": {"median": 191.0}},
    {"figure": "steady / adaptive", "median": {"batches_to_steady": None, "utilization": 0.63}},
    {"name": "summary", "acks_per_object": 137.1},
]


def test_a_figure_in_prose_is_rendered_from_its_line(tmp_path: Path, monkeypatch) -> None:
    """The median by default, a dotted field, a glob's lines as lowest–highest, the reducers and the
    formats; a marker wrapped over two lines as prose wraps."""
    monkeypatch.setattr(docs_hooks, "BENCH_DATA", tmp_path)
    _write(tmp_path, "b", LINES)
    cases = {
        '"light: p50 latency, a"': "1,373",
        '"light: p50 latency, a" ratio | times': "1.8",
        '"light: p50 latency, *" | s': "1.4–2.4",
        '"light: p50 latency, *" | max | s': "2.4",
        '"light: p50 latency, *" | min | int': "1,373",
        '"light: p50 latency, b" offered_rate | int': "220,883",
        '"light: p50 latency, b" peer.median | s': "0.19",
        '"steady / adaptive" median.batches_to_steady': "never",
        '"steady / adaptive" median.utilization | percent': "63",
        '"summary" acks_per_object': "137",
    }
    for spec, shown in cases.items():
        assert docs_hooks.on_page_markdown(f"x {{{{ figure b {spec} }}}} y", page=Page) == f"x {shown} y", spec
    wrapped = 'at {{ figure b "light: p50\n  latency, a"\n  | s }} s'
    assert docs_hooks.on_page_markdown(wrapped, page=Page) == "at 1.4 s"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ('b "light: p99 latency, a"', r"b has no line 'light: p99 latency, a'; its lines are: light: p50 latency, a; "),
        ('b "light: p50 latency, a" medain', r"has no field 'medain': the line holds figure, median, min, max, ratio"),
        ('b "steady / adaptive" median.peak', r"no field 'median.peak': median holds batches_to_steady, utilization"),
        ('b "light: p50 latency, a" | sec', r"no filter 'sec': the filters are min, max, number, s, times"),
        ('b "light: *" offered_rate', r"has no field 'offered_rate'"),
        ('nothing "x"', r"nothing\.jsonl"),
    ],
)
def test_a_figure_the_file_does_not_have_fails_the_build(tmp_path: Path, monkeypatch, spec: str, says: str) -> None:
    """Naming the page, the marker and what the file has instead."""
    from mkdocs.exceptions import PluginError

    monkeypatch.setattr(docs_hooks, "BENCH_DATA", tmp_path)
    _write(tmp_path, "b", LINES)
    with pytest.raises(PluginError) as raised:
        docs_hooks.on_page_markdown(f"see {{{{ figure {spec} }}}}.", page=Page)
    message = str(raised.value)
    assert message.startswith(f"guide/some-page.md: cannot fill a generated section: {{{{ figure {spec} }}}}: ")
    assert re.search(says, message), message


def test_every_figure_marker_of_the_docs_renders() -> None:
    """Every page's figures render: the strict build would fail on one, this says which page."""
    for path in DOCS.rglob("*.md"):
        rendered = docs_hooks.expand_figures(path.read_text())
        assert "{{" not in rendered, path


def _by_path(name: str, what: str) -> dict[tuple[str, str], dict]:
    return {(f["weight"], f["path"]): f for f in _figures(name) if f["figure"].split(": ", 1)[1].startswith(what)}


def test_the_peers_page_claims_what_its_data_say() -> None:
    """The claims docs/benchmarks/index.md#against-python-stream-processors makes in words (who
    leads, who trails, what exceeds what) hold for the file its numbers are rendered from: a run
    that changes who leads must change the prose too."""
    rate = {k: f["ratio"] for k, f in _by_path("peers", "records/s").items()}
    capacity = {k: f["median"] for k, f in _by_path("peers", "records/s").items()}
    cpu = {k: f["median"] for k, f in _by_path("peers", "CPU s per million").items()}
    rss = {k: f["median"] for k, f in _by_path("peers", "peak RSS").items()}
    spark = ("sluice-receiver", "sluice-direct", "sluice-kafka-structured")
    peers = ("quixstreams", "bytewax", "faust-streaming")
    for path in spark[:2]:  # light: faster than every peer and the raw loop
        assert rate["light", path] > max(1.0, rate["light", "aiokafka"]), (path, rate)
    assert rate["light", "sluice-kafka-structured"] < 1.0  # trails the best peer
    assert min(rate["heavy", p] for p in spark) > 1.0  # heavy: every Sluice path leads
    cores = {p: cpu["heavy", p] * capacity["heavy", p] / 1e6 for p in (*spark[:2], "bytewax")}
    assert min(cores[p] for p in spark[:2]) > 1.5 > cores["bytewax"], cores  # both cores, against one
    assert min(rss[w, p] for w in ("light", "heavy") for p in spark) > max(
        rss[w, p] for w in ("light", "heavy") for p in peers
    )
    latency = {(f["weight"], f["path"], f["figure"].split(": ")[1].split(",")[0]): f for f in _figures("peers")}
    for weight in ("light", "heavy"):
        for load in ("50%", "80%"):
            p50 = {p: latency[weight, p, f"p50 latency at {load}"]["median"] for p in (*spark, *peers)}
            assert max(p50["quixstreams"], p50["bytewax"]) < min(p50[p] for p in spark)  # the peers lead
            for path in spark[:2]:  # the batch interval (1 s) plus the batch's own time
                assert p50[path] > 1000, (weight, load, path)
            assert p50["sluice-kafka-structured"] > 2 * 1000  # well past its 1 s trigger
    at_50 = {(w, p): latency[w, p, "p50 latency at 50%"]["median"] for w in ("light", "heavy") for p in spark[:2]}
    assert max(at_50, key=at_50.__getitem__) == ("light", "sluice-receiver")  # "except the receiver path's light 50 %"
    short = set()  # the producer "offers within 3 % of the asked rate up to about 200,000 records/s"
    for (weight, path, name), f in latency.items():
        if "latency at" not in name:
            continue
        asked = capacity[weight, path] * int(name.rsplit(" ", 1)[1].rstrip("%")) / 100
        if f["offered_rate"] < 0.97 * asked:
            assert asked > 200_000, (weight, path, name, f["offered_rate"], asked)
            short.add((weight, path, name.rsplit(" ", 1)[1]))
    assert short == {("light", "sluice-receiver", "80%"), ("light", "sluice-direct", "80%")}  # as the page names


def test_the_scaling_out_page_claims_what_its_data_say() -> None:
    """docs/benchmarks/index.md#scaling-out-on-a-standalone-cluster's words against peers_scale.jsonl."""
    figures = {f["figure"].split(": ", 1)[1]: f for f in _figures("peers_scale")}
    paths = ("sluice-receiver", "sluice-direct", "sluice-kafka-structured")
    peers = ("quixstreams", "bytewax", "faust-streaming")
    assert all(figures[f"records/s, {p}"]["ratio"] <= 1.0 for p in peers)  # Bytewax, the best peer
    best = figures["records/s, bytewax"]["median"]
    for path in paths:
        assert figures[f"records/s, {path}, 2 workers"]["ratio"] > 1.0  # every Sluice path scales out
        assert figures[f"records/s, {path}, 1 worker"]["median"] < best  # a little slower with one
        assert figures[f"records/s, {path}, 2 workers"]["median"] > best  # with two they lead it
    cpu = {k.split(", ", 1)[1]: f["median"] for k, f in figures.items() if k.startswith("CPU")}
    assert min(cpu, key=cpu.__getitem__) == "aiokafka" and min(peers, key=cpu.__getitem__) == "bytewax"  # leanest
    for workers in ("1 worker", "2 workers"):  # sluice-kafka pays more for its extra serialisation
        assert cpu[f"sluice-kafka-structured, {workers}"] > max(cpu[f"{p}, {workers}"] for p in paths[:2])


def test_the_campaign_table_renders_a_row_per_run() -> None:
    line = {
        "seed": 2, "seconds": 1800, "faults": 112, "bursts": 36, "records": 89299, "recovery_p50_s": 9.7,
        "recovery_p99_s": 15.8, "recovery_each_healing_p50_s": 12.6, "recovery_each_healing_p99_s": 44.7,
        "rss_growth": None, "blocks_left": 0,
    }  # fmt: skip
    rows = docs_hooks.render_campaigns([line]).splitlines()
    assert rows[2] == "| 2 | 30 min | 112 | 36 | 89,299 | 9.7 / 15.8 s | 12.6 / 44.7 s | not judged | 0 |"


def test_the_fault_campaign_page_says_what_its_data_say() -> None:
    """docs/operations/chaos.md#figures against chaos.jsonl: the table is rendered from the file;
    every run lost, duplicated and reordered nothing and drained; each met the bar (recovery p99
    <= 30 s, no service's RSS up 10 %) on a quiet machine, the thirty-minute ones with 100 faults or
    more; the block file left is seed 1's, before the orphan sweep."""
    runs = {f["seed"]: f for f in _figures("chaos")}
    assert set(runs) == {1, 2, 3, 57}
    assert all(f["lost"] == f["duplicated"] == f["order_violations"] == f["not_taken"] == 0 for f in runs.values())
    assert all(f["drained_in_time"] for f in runs.values())
    assert all(f["recovery_p99_s"] <= 30 and f["rss_growth"] <= 10 and f["load_average"][0] < 1 for f in runs.values())
    assert all(runs[s]["seconds"] == 1800 and runs[s]["faults"] >= 100 for s in (1, 2, 3))
    assert {s: f["blocks_left"] for s, f in runs.items() if f["blocks_left"]} == {1: 1}
    page = (DOCS / "operations" / "chaos.md").read_text()
    assert "<!-- campaigns: chaos -->" in page[page.index("## Figures") : page.index("## What is not covered")]


def test_the_default_by_evidence_says_what_the_control_run_says() -> None:
    """docs/guide/rate-control.md#the-default-by-evidence, against control.jsonl: the wins, the two
    losses that keep the default at ``pid``, and the cold-start goals met."""
    lines = {f["figure"]: f for f in _figures("control") if "figure" in f}
    verdicts = {name.split(" / ")[0]: f["verdict_vs_pid"] for name, f in lines.items() if name.endswith("/ adaptive")}
    losses = {(s, k) for s, v in verdicts.items() for k, r in v.items() if r == "loss"}
    assert losses == {("cold_start", "batches_to_steady"), ("periodic", "peak_scheduling_delay_intervals")}
    wins = {s for s, v in verdicts.items() if v["batches_to_steady"] == "win"}
    assert wins == {"kafka_backlog", "step", "cold_start_rate", "cold_0.1x", "cold_1x", "cold_10x"}
    assert verdicts["cliff"]["peak_scheduling_delay_intervals"] == verdicts["cliff"]["steady_utilization"] == "win"
    for scenario in ("cold_0.1x", "cold_1x", "cold_10x"):  # the goals: peak <= 2, steady within 5, none at min
        adaptive = lines[f"{scenario} / adaptive"]
        assert adaptive["max"]["peak_scheduling_delay_intervals"] <= 2
        assert adaptive["median"]["batches_to_steady"] <= 5 and adaptive["median"]["batches_at_min_rate"] == 0
    from sluice.config import key

    assert key("estimator.name").default == "pid"


def test_the_latency_target_kept_latency_down_for_fewer_records() -> None:
    """docs/guide/rate-control.md#the-latency-target: under the target, against the throughput one."""
    lines = {f["figure"]: f for f in _figures("latency_target")}
    assert (
        lines["latency_p99_ms"]["met"] and lines["latency_p99_ms"]["ratio"] < 1 and lines["latency_p50_ms"]["ratio"] < 1
    )
    assert lines["throughput"]["ratio"] < 1


def test_the_arena_verdicts_render_medians_and_ties() -> None:
    """docs/guide/rate-control.md#the-estimator-arena's table: ``adaptive`` / PID medians, each
    figure's verdict from ``sluice.testing.arena.metrics``."""
    ours = {"batches_to_steady": 56.0, "peak_scheduling_delay_intervals": 1.314, "batches_at_min_rate": 0.0,
            "steady_utilization": 0.99465, "peak_delay_after_change_intervals": None}  # fmt: skip
    pid = {**ours, "batches_to_steady": None, "peak_scheduling_delay_intervals": 1.8905, "steady_utilization": 0.916}
    line = {"figure": "gc_cliff / adaptive", "median": ours, "peer": {"name": "pid", "median": pid}}
    rows = docs_hooks.render_verdicts([{"figure": "gc_cliff / pid", "median": pid}, line]).splitlines()
    assert rows[2:] == ["| `gc_cliff` | 56 / never | 1.31 / 1.89 | 0 / 0 | 0.995 / 0.916 | win, win, tie, win |"]
    guide = (DOCS / "guide" / "rate-control.md").read_text()
    assert "<!-- verdicts: arena -->" in guide[guide.index("## The estimator arena") :]


def test_the_arena_ties_the_guide_explains_are_ties() -> None:
    """ "Where ``adaptive`` only ties": the three figures it names are ties, not wins or losses."""
    from sluice.testing.arena.metrics import verdict

    lines = {f["figure"]: f for f in _figures("arena")}

    def judged(scenario: str) -> dict[str, str]:
        return verdict(lines[f"{scenario} / adaptive"]["median"], lines[f"{scenario} / pid"]["median"])

    assert judged("step_down")["steady_utilization"] == "tie"
    assert judged("periodic")["peak_scheduling_delay_intervals"] == "tie"
    assert judged("step_up")["peak_scheduling_delay_intervals"] == "tie"
