"""Clients given a leader and its standbys: the address list, and where a client goes next."""

from __future__ import annotations

import pytest

from sluice.config import ConfigError, resolve
from sluice.errors import InvalidArgument
from sluice.tracker.client.leader_finder import LeaderFinder, parse_addresses


def test_a_list_is_checked_address_by_address() -> None:
    assert parse_addresses("h1:7100, h2:7100") == ["h1:7100", "h2:7100"]
    with pytest.raises(InvalidArgument, match="'h2' is not HOST:PORT"):
        parse_addresses("h1:7100,h2")


def test_the_configured_tracker_may_be_a_list_and_a_bad_entry_is_named() -> None:
    config = resolve(["receiver"], environ={"SLUICE_RECEIVER_TRACKER": "h1:7100,h2:7100"})
    assert config["receiver.tracker"] == "h1:7100,h2:7100"
    with pytest.raises(ConfigError, match="receiver.tracker.*several separated by commas"):
        resolve(["receiver"], environ={"SLUICE_RECEIVER_TRACKER": "h1:7100,h2"})


def test_a_client_goes_round_the_list_and_follows_the_leader_named() -> None:
    finder = LeaderFinder("a:1,b:2,c:3")
    assert finder.current == "a:1"
    finder.failed()
    assert finder.current == "b:2"
    finder.redirect("c:3")  # b is a standby naming c
    assert finder.current == "c:3"
    finder.failed()
    assert finder.current == "a:1"
    finder.redirect("")  # a standby that knows no leader yet: the next one
    assert finder.current == "b:2"
    finder.redirect("not an address")
    assert finder.current == "c:3"
    assert not finder.redirect("elsewhere:4")  # not on the list: refused, whatever the transport
    assert finder.current == "a:1"
    assert finder.redirect("a:1")  # the current one naming itself: the next one
    assert finder.current == "b:2"
