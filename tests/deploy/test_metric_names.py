"""Each metric the issues name (and the deploy files rely on) is registered by its service."""

from __future__ import annotations

import pytest

from tests.deploy.metric_names import REQUIRED, exported


@pytest.mark.parametrize("service", sorted(REQUIRED))
def test_service_exports_the_metrics_the_deploy_files_use(service: str) -> None:
    families = exported(service)
    missing = {name: kind for name, kind in REQUIRED[service].items() if families.get(name) != kind}
    assert not missing, f"{service} does not export (name: type) {missing}; it has {sorted(families)}"
