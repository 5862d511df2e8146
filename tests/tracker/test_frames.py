"""FrameDecoder on its own: how a byte stream splits into maps, whatever the chunking.

The server and client tests go through sockets, where a broken splitter shows as a request that
never gets its reply (a timeout); these say what is wrong at once.
"""

from __future__ import annotations

import msgpack
import pytest

from sluice.tracker.wire.protocol import CLIENT_LIMITS, HEADER, BadFrame, FrameDecoder, FrameTooLarge, Limits, encode

MESSAGES = [
    {"op": "hello", "id": 1},
    {"id": 2, "ok": {"blocks": b"\x00" * 300, "ids": list(range(50))}},
    {"op": "update_rate", "rate": 1.5},
]
STREAM = b"".join(map(encode, MESSAGES))


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:])]


def test_every_single_cut_of_the_stream_gives_the_same_maps():
    for cut in range(len(STREAM) + 1):
        decoder = FrameDecoder()
        out = [m for chunk in split_at(STREAM, [cut]) for m in decoder.feed(chunk)]
        assert out == MESSAGES, cut


def test_byte_by_byte_and_all_at_once():
    decoder = FrameDecoder()
    out = [m for i in range(len(STREAM)) for m in decoder.feed(STREAM[i : i + 1])]
    assert out == MESSAGES
    assert FrameDecoder().feed(STREAM) == MESSAGES


def test_a_partial_frame_waits_for_the_rest():
    decoder = FrameDecoder()
    first = encode(MESSAGES[1])
    assert decoder.feed(first[:-1]) == []
    assert decoder.feed(first[-1:] + encode(MESSAGES[0])[:3]) == [MESSAGES[1]]
    assert decoder.feed(encode(MESSAGES[0])[3:]) == [MESSAGES[0]]


def test_a_large_reply_in_socket_sized_chunks():
    reply = {"id": 7, "ok": {"ids": [f"block-{i}" for i in range(20_000)], "bin": bytes(range(256)) * 2_000}}
    data = encode(reply)
    decoder = FrameDecoder(CLIENT_LIMITS)
    out = [m for chunk in split_at(data, list(range(65_536, len(data), 65_536))) for m in decoder.feed(chunk)]
    assert out == [reply]


def framed(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xc1", "undecodable"),  # a byte msgpack never uses
        (msgpack.packb({"a": 1}) + b"\x00", "undecodable"),  # trailing bytes after the map
        (msgpack.packb([1, 2]), "not_a_map"),
    ],
)
def test_a_bad_payload_is_one_bad_frame_and_the_next_frame_still_decodes(payload, reason):
    decoder = FrameDecoder()
    out = decoder.feed(framed(payload) + encode(MESSAGES[0]))
    assert len(out) == 2
    assert isinstance(out[0], BadFrame) and out[0].reason == reason
    assert out[1] == MESSAGES[0]
    assert decoder.feed(encode(MESSAGES[2])) == [MESSAGES[2]]


def test_a_length_over_the_limit_is_refused_before_its_payload_arrives():
    decoder = FrameDecoder(Limits(max_frame=1_000))
    with pytest.raises(FrameTooLarge, match="1001 bytes is over the limit of 1000"):
        decoder.feed(HEADER.pack(1_001))
