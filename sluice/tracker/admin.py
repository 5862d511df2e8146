"""``sluice-admin``: an operator's commands to a running tracker.

``sluice-admin skip-block --tracker HOST:PORT --stream S --block ID [--reason TEXT]`` skips a block
of a pending batch that cannot be read (its file is gone or damaged).  A driver under
``on_batch_failure = "stop"`` stops on such a batch and prints this command with the block filled
in; the tracker logs the skip before it answers, and the driver's next start re-runs the batch
without the block.  The skip is listed in ``status`` (``skipped_blocks``) and counted in
``sluice_tracker_blocks_skipped``.  The connection takes the ``admin`` role: give the tracker's
full-access token (``--token-file``) or an admin client certificate (``--tls-cert``/``--tls-key``).

Exit codes: 0 done; 1 the tracker refused or could not be reached (the message says which); 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from sluice.config import ConfigError, read_token
from sluice.errors import SluiceError
from sluice.tracker.client.tracker_client import TrackerClient
from sluice.tracker.wire.tls import client_context


def skip_block_command(tracker: str, stream_id: int, block_id: str) -> str:
    """The command line that skips a block, as the driver prints it."""
    return f"sluice-admin skip-block --tracker {tracker} --stream {stream_id} --block {block_id}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice-admin", description="Operator commands to a Sluice tracker")
    commands = parser.add_subparsers(dest="command", required=True)
    skip = commands.add_parser("skip-block", help="skip a block of a pending batch that cannot be read")
    skip.add_argument("--tracker", required=True, help="the tracker's HOST:PORT")
    skip.add_argument("--stream", type=int, required=True, help="the block's stream id")
    skip.add_argument("--block", required=True, help="the block id")
    skip.add_argument("--reason", default="skipped by an operator", help="shown in status")
    skip.add_argument("--token-file", default="", help="the tracker's full-access token")
    skip.add_argument("--tls-ca", default="", help="CA file to verify the tracker with (TLS when set)")
    skip.add_argument("--tls-cert", default="", help="admin client certificate")
    skip.add_argument("--tls-key", default="", help="its key")
    return parser


async def _skip(args: argparse.Namespace) -> None:
    client = TrackerClient(
        args.tracker,
        "admin",
        auth_token=read_token(args.token_file),
        ssl=client_context("admin", args.tls_ca, args.tls_cert, args.tls_key),
    )
    async with client:
        await client.skip_block(args.stream, args.block, args.reason)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        asyncio.run(_skip(args))
    except (ConfigError, ValueError) as exc:
        print(f"sluice-admin: {exc}", file=sys.stderr)
        return 2
    except (SluiceError, OSError) as exc:
        print(f"sluice-admin: {args.command} failed: {exc}", file=sys.stderr)
        return 1
    print(f"block {args.block} of stream {args.stream} skipped; the driver's next start goes on without it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
