"""Reading a file an operator names: a regular file of bounded size is read, anything else is
refused in one line naming the file, what it is and what is allowed, without blocking."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from sluice.config_key import ConfigError
from sluice.files import read_small_file

ALLOWED = "allowed: a regular file of at most 100 bytes"


def test_a_regular_file_up_to_the_limit_is_read_and_a_link_is_followed(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"x" * 100)
    assert read_small_file(path, "token file", 100) == b"x" * 100
    (tmp_path / "link").symlink_to(path)  # how Kubernetes mounts a secret
    assert read_small_file(tmp_path / "link", "token file", 100) == b"x" * 100
    (tmp_path / "empty").write_bytes(b"")
    assert read_small_file(tmp_path / "empty", "token file", 100) == b""


def test_one_byte_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"x" * 101)
    with pytest.raises(ConfigError, match=f"^token file {path} holds 101 bytes; {ALLOWED}$"):
        read_small_file(path, "token file", 100)


def test_a_large_sparse_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "token"
    with path.open("wb") as fh:
        fh.truncate(300 << 20)  # 300 MiB that take no disk
    with pytest.raises(ConfigError, match=f"^token file {path} holds 314,572,800 bytes; {ALLOWED}$"):
        read_small_file(path, "token file", 100)


def test_a_fifo_is_refused_at_once_rather_than_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=f"^token file {fifo} is a FIFO; {ALLOWED}$"):
        read_small_file(fifo, "token file", 100)


@pytest.mark.parametrize(("path", "kind"), [("/dev/zero", "a character device"), ("/", "a directory")])
def test_devices_and_directories_are_refused(path: str, kind: str) -> None:
    with pytest.raises(ConfigError, match=f"^token file {path} is {kind}; {ALLOWED}$"):
        read_small_file(path, "token file", 100)


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token.sock"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        with pytest.raises(ConfigError, match=f"^token file {path} is a socket; {ALLOWED}$"):
            read_small_file(path, "token file", 100)


def test_a_missing_or_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"^token file {tmp_path}/gone does not exist$"):
        read_small_file(tmp_path / "gone", "token file", 100)
    with pytest.raises(ConfigError, match=f"^token file {tmp_path}/gone/x cannot be read: Not a directory$"):
        (tmp_path / "gone").write_text("x")
        read_small_file(tmp_path / "gone" / "x", "token file", 100)
