"""The service's handler table against the protocol's ops: checked when the service module loads."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sluice.errors import InvalidArgument
from sluice.tracker.server.service import HANDLERS, TrackerService, check_handlers, handler
from sluice.tracker.wire import messages as m
from sluice.tracker.wire.protocol import OPS


def test_every_op_has_its_handler_taking_the_schemas_request() -> None:
    assert set(HANDLERS) == set(OPS)
    assert all(HANDLERS[name].request is op.request for name, op in OPS.items())
    check_handlers(HANDLERS, OPS)  # what the module ran at import


def test_an_op_without_a_handler_and_a_handler_without_an_op_are_named() -> None:
    table = {name: h for name, h in HANDLERS.items() if name != "heartbeat"}
    table["ping"] = handler(m.StatusRequest, TrackerService.op_status)
    with pytest.raises(InvalidArgument, match="op heartbeat has no handler; handler ping answers no op") as exc:
        check_handlers(table, OPS)
    assert "sluice.tracker.server.service.HANDLERS" in str(exc.value)


def test_a_handler_taking_another_ops_request_is_named() -> None:
    table = {**HANDLERS, "status": handler(m.HelloRequest, TrackerService.op_hello)}
    with pytest.raises(
        InvalidArgument, match="handler status takes HelloRequest, but the protocol's status request is "
    ):
        check_handlers(table, OPS)


@pytest.mark.slow  # a fresh interpreter: the check runs when the module is first imported
def test_the_service_does_not_load_against_a_protocol_with_an_op_it_does_not_handle() -> None:
    code = (
        "import sluice.tracker.wire.protocol as p\n"
        "p.OPS = {**p.OPS, 'ping': p.OPS['status']}\n"
        "import sluice.tracker.server.service\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "InvalidArgument: the tracker's handler table does not match its protocol: op ping has no handler" in (
        done.stderr
    )
