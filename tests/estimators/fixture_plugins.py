"""Source text of the fixture plugin modules that ``install_plugin`` (conftest.py) installs."""

from __future__ import annotations

GOOD_PLUGIN = '''
import pluggy

hookimpl = pluggy.HookimplMarker("sluice")


class FixedStep:
    """The batch's processing rate plus ``step``: easy to tell apart from the built-ins."""

    def __init__(self, batch_interval_ms, step):
        self.batch_interval_ms, self.step = batch_interval_ms, step

    def compute(self, time_ms, elements, processing_delay_ms, scheduling_delay_ms):
        return elements / processing_delay_ms * 1000 + self.step


def factory(batch_interval_ms, options):
    unknown = set(options) - {"step"}
    if unknown:
        raise ValueError(f"fixed-step: unknown option(s) {sorted(unknown)}; allowed: step")
    return FixedStep(batch_interval_ms, float(options.get("step", 1.0)))


@hookimpl
def sluice_register_estimators():
    return {NAMES}
'''


def good_plugin(names: str = '{"fixed-step": factory}') -> str:
    """The good plugin's source, registering ``names`` (a dict literal over ``factory``)."""
    return GOOD_PLUGIN.replace("{NAMES}", names)
