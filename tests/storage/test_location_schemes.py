"""A block location names a store by its scheme: only the schemes of registered stores pass, so
a forged location cannot send a task (or the driver's deletes) to a host through another protocol."""

from __future__ import annotations

import pytest

from sluice.storage.block_store import LocationRefused, check_location


@pytest.mark.parametrize(
    "location",
    ["http://attacker.example/x/stream-0/b.blk", "ftp://host/x/stream-0/b.blk", "gopher://host/x/stream-0/b.blk"],
)
def test_a_location_whose_scheme_no_store_registers_is_refused(location: str) -> None:
    with pytest.raises(LocationRefused, match="is not one of a registered block store"):
        check_location(location, 0, "b")


def test_the_schemes_of_registered_stores_pass() -> None:
    for location in ("file:///var/blocks/stream-0/b.blk", "s3://bucket/p/stream-0/b.blk", "gs://b/stream-0/b.blk"):
        assert check_location(location, 0, "b") == location
