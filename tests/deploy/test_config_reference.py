"""The documented configuration reference is the one generated from the schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sluice import config
from sluice.config import SCHEMA, reference_table
from tests.deploy.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import gen_config_reference as gen
import pytest


def test_documented_reference_matches_schema() -> None:
    page = gen.PAGE.read_text()
    table = gen.current_table(page)
    assert table is not None, (
        f"{gen.PAGE} has no <!-- config-reference:start/end --> block; run scripts/gen_config_reference.py"
    )
    assert table == reference_table(), f"{gen.PAGE} is stale; run scripts/gen_config_reference.py"


def test_the_page_is_in_the_docs_and_the_readme_points_at_it() -> None:
    assert gen.PAGE == REPO / "docs" / "reference" / "configuration.md"
    assert "reference/configuration.md" in (REPO / "mkdocs.yml").read_text()
    assert "docs/reference/configuration.md" in (REPO / "README.md").read_text()


def test_reference_lists_every_key_with_its_environment_variable() -> None:
    table = reference_table()
    for key in SCHEMA:
        assert f"`{key.dotted}`" in table and f"`{key.env}`" in table


@pytest.mark.slow
def test_generator_rewrites_only_its_block(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    page.write_text(f"# Title\n\nbefore\n\n{gen.START}\nold table\n{gen.END}\n\nafter\n")
    script = REPO / "scripts" / "gen_config_reference.py"
    stale = subprocess.run(
        [sys.executable, str(script), "--page", str(page), "--check"], capture_output=True, text=True
    )
    assert stale.returncode == 1 and "stale" in stale.stdout
    subprocess.run([sys.executable, str(script), "--page", str(page)], check=True, capture_output=True)
    text = page.read_text()
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert "old table" not in text and gen.current_table(text) == reference_table()
    fresh = subprocess.run([sys.executable, str(script), "--page", str(page), "--check"])
    assert fresh.returncode == 0


def test_generator_appends_a_section_when_markers_are_missing(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    page.write_text("# Title\n")
    assert gen.main(["--page", str(page)]) == 0
    assert "## Every key" in page.read_text()
    assert gen.main(["--page", str(page), "--check"]) == 0


def test_only_keys_where_0_means_none_say_so() -> None:
    """A stream id 0 or a PID gain 0 is a value like any other; a cap, a floor or retries of 0 are none."""
    says = {k.dotted for k in SCHEMA if "0 means none" in k.describe_allowed()}
    assert says == {
        "receiver.max_rate",
        "receiver.max_block_bytes",
        "kafka.max_rate_per_partition",
        "kafka.min_rate_per_partition",
        "kafka.max_bytes_per_batch",
        "kafka.max_retries",
        "backpressure.initial_rate",
        "backpressure.signal_interval_ms",
        "driver.max_batch_retries",
        "driver.max_batch_partitions",
    }
    assert "0 means none" not in config.key("receiver.stream_id").describe_allowed()
