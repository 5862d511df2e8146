"""Basic auth of the metrics endpoints, without sockets: who is allowed, what a check costs in
bcrypt rounds, what is remembered, and the per-address bucket of failed logins."""

from __future__ import annotations

import base64

import bcrypt

from sluice.metrics_auth import MAX_PASSWORD_BYTES, BasicAuth, Credentials, PeerLimiter, parse

HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4))  # cost 4: a fast test, still bcrypt


def basic(user: str, password: str | bytes) -> bytes:
    raw = password if isinstance(password, bytes) else password.encode()
    return b"Basic " + base64.b64encode(user.encode() + b":" + raw)


def test_basic_auth_allows_the_user_with_the_password_only() -> None:
    auth = BasicAuth({"prometheus": HASH})
    assert auth.allows(basic("prometheus", "secret"))
    assert auth.allows(b"basic " + basic("prometheus", "secret").split()[1])  # the scheme in any case
    for header in (
        None,
        b"",
        basic("prometheus", "wrong"),
        basic("someone", "secret"),
        basic("prometheus", ""),
        b"Bearer secret",
        b"Basic not-base64!",
        b"Basic " + base64.b64encode(b"no colon"),
    ):
        assert not auth.allows(header), header


def test_a_success_is_remembered_and_a_failure_costs_a_bcrypt_round_each_time() -> None:
    auth = BasicAuth({"prometheus": HASH})
    for _ in range(3):
        assert auth.allows(basic("prometheus", "secret"))
    assert auth.rounds == 1
    assert auth.remembered(Credentials(b"prometheus", b"secret"))
    assert not auth.remembered(Credentials(b"prometheus", b"secreT"))
    for _ in range(2):
        assert not auth.allows(basic("prometheus", "wrong"))
    assert auth.rounds == 3
    assert not auth.allows(basic("someone", "secret"))  # an unknown name costs a round too: timing tells nothing
    assert auth.rounds == 4
    assert "secret" not in repr(vars(auth))  # nothing holds the password
    assert "secret" not in repr(parse(basic("prometheus", "secret")))  # nor shows it in a log line


def test_what_is_remembered_is_one_digest_per_user_whatever_the_attempts() -> None:
    auth = BasicAuth({"a": HASH, "b": HASH})
    for user in ("a", "b", "a"):
        assert auth.allows(basic(user, "secret"))
    for attempt in range(5):
        assert not auth.allows(basic("a", f"guess{attempt}"))
    assert len(auth._accepted) == 2
    assert auth.remembered(Credentials(b"a", b"secret"))  # a failure forgets nothing


def test_a_password_over_bcrypts_72_bytes_is_refused_without_a_round() -> None:
    """bcrypt 4.1 and later raise for it; the endpoint would have answered with a traceback."""
    auth = BasicAuth({"prometheus": HASH})
    assert not auth.allows(basic("prometheus", b"x" * (MAX_PASSWORD_BYTES + 1)))
    assert not auth.allows(basic("prometheus", b"secret" + b"x" * 100))  # not a prefix match either
    assert auth.rounds == 0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_address_has_a_burst_then_a_token_a_second() -> None:
    clock = Clock()
    limiter = PeerLimiter(burst=3, per_s=1.0, clock=clock)
    assert [limiter.take("10.0.0.1") for _ in range(4)] == [True, True, True, False]
    assert limiter.take("10.0.0.2")  # another address has its own bucket
    clock.now = 1.0
    assert [limiter.take("10.0.0.1") for _ in range(2)] == [True, False]
    clock.now = 100.0  # a long quiet spell refills to the burst, no more
    assert [limiter.take("10.0.0.1") for _ in range(4)] == [True, True, True, False]


def test_a_success_gives_its_token_back() -> None:
    limiter = PeerLimiter(burst=2, per_s=0.0, clock=Clock())
    for _ in range(10):
        assert limiter.take("10.0.0.1")
        limiter.give_back("10.0.0.1")
    assert limiter.take("10.0.0.1") and limiter.take("10.0.0.1") and not limiter.take("10.0.0.1")


def test_the_table_of_addresses_is_bounded_forgetting_the_least_recently_seen() -> None:
    limiter = PeerLimiter(burst=1, per_s=0.0, peers=3, clock=Clock())
    for peer in ("a", "b", "c"):
        assert limiter.take(peer)
    assert not limiter.take("a")  # "a" seen again: now "b" is the oldest
    assert limiter.take("d")
    assert len(limiter) == 3
    assert not limiter.take("a") and not limiter.take("c")  # still remembered, still empty
    assert limiter.take("b")  # forgotten: a full bucket again
