"""Where blocks live between the receiver that wrote them and the Spark task that reads them.

A store is named by a URL whose scheme chooses it among the registered stores; ``file://`` (a
local or shared POSIX directory) and the object stores and remote filesystems of fsspec
(:mod:`~sluice.storage.fsspec_store`: ``s3://``, ``gs://``, ``abfs://``, ``hdfs://``, ...) are built
in, and another store only has to satisfy :class:`BlockStore` and register
(``sluice_register_block_stores``).  Writes are durable
before they are reported to the tracker (:func:`sluice.durable.atomic_write`: temp name, fsync,
rename, fsync of the directory), so a crash leaves either the whole block or nothing under its
final name.

Locations are absolute ``file://`` URLs, so a PySpark worker with another working directory reads
the same file.  Every error names the block and the location.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from sluice.block_info import OffsetRange
from sluice.durable import atomic_write, fsync_dir
from sluice.errors import SluiceError
from sluice.kafka.bad_records import BadRecord
from sluice.plugins import UnknownNameError, registry
from sluice.storage import block_format

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,255}$")
MAX_BLOCK_BYTES = 1 << 30  # a block file larger than this is refused before it is read


@dataclass(frozen=True)
class Block:
    """One block as the receiver wrote it and a task reads it.

    :param stream_id: the stream it belongs to.
    :param block_id: its id (also its file name in a file store).
    :param records: the records, in the order they were stored.
    :param offset_ranges: the source offsets the records cover (Kafka); empty for other sources.
    :param bad_records: on read, the Kafka records that could not be decoded (left out of
        ``records``); the reader applies ``driver.bad_records`` to them.
    """

    stream_id: int
    block_id: str
    records: list
    offset_ranges: tuple[OffsetRange, ...] = ()
    bad_records: tuple[BadRecord, ...] = ()


@dataclass(frozen=True)
class StoredBlock:
    """A block file found by listing a store: its id, its location, when it was last written
    (seconds since the epoch, the store's clock)."""

    block_id: str
    location: str
    modified: float


class BlockStoreError(SluiceError):
    """A block could not be written, read or deleted; the message names the block and location."""


class BlockMissingError(BlockStoreError):
    """No block at the location (deleted, or never written there)."""

    pass


class LocationRefused(BlockStoreError):
    """A block location outside the store, not shaped ``<store>/stream-<id>/<block_id>.blk``, or not a
    regular file of at most :data:`MAX_BLOCK_BYTES`: never read, never deleted.
    """


class BlockCorruptError(BlockStoreError):
    """The bytes at the location are not the block (bad CRC, truncated, another block's header)."""

    pass


class BlockStore(Protocol):
    """Where blocks are kept; a plugin store implements this and registers its URL scheme.

    ``url`` is the store's own URL.  ``encode(block)`` turns a block into buffers (CPU only: a receiver
    calls it on its event loop) and ``write_encoded(stream_id, block_id, parts)`` makes them durable and
    returns the location URL (I/O only: called in a thread); ``write(block)`` is both.  ``read(location)``
    raises :class:`BlockMissingError` or :class:`BlockCorruptError` naming the block; ``delete`` of a
    missing block is not an error.  Every other failure is a :class:`BlockStoreError` naming the block
    and the location.  A store may also have ``delete_many(locations)`` (one bulk request): the driver
    uses it when it is there; and ``stored_blocks(stream_id, prefix)``, the :class:`StoredBlock` of
    every block of the stream whose id starts with ``prefix``: a receiver lists its own ids with it
    to delete what a previous run of it stored but never reported (:mod:`sluice.receiver.orphans`).
    """

    url: str

    def write(self, block: Block) -> str: ...

    def encode(self, block: Block) -> list[bytes]: ...

    def write_encoded(self, stream_id: int, block_id: str, parts: list[bytes]) -> str: ...

    def read(self, location: str) -> Block: ...

    def delete(self, location: str) -> None: ...


def encode_block(block: Block, location: str) -> list[bytes]:
    """The block's bytes, its id checked; errors name the block and where it was going."""
    if not _SAFE_ID.match(block.block_id):
        raise BlockStoreError(
            f"block id {block.block_id!r} is not allowed: letters, digits, '.', '_', ':', '-' "
            "(starting with a letter or digit, at most 256)"
        )
    try:
        return block_format.encode_parts(block.stream_id, block.block_id, block.records, block.offset_ranges)
    except block_format.FormatError as exc:
        raise BlockStoreError(f"block {block.block_id} for {location}: {exc}") from exc


def decode_block(data: bytes, block_id: str, location: str) -> Block:
    """Check (CRC, size, header) and parse the bytes read from ``location``; Kafka records that
    cannot be decoded are the block's ``bad_records``."""
    bad: list[BadRecord] = []
    try:
        header, records = block_format.decode(data, bad)
    except block_format.FormatError as exc:
        raise BlockCorruptError(f"block {block_id} at {location} is corrupt: {exc}") from exc
    if header.get("block_id") != block_id:
        raise BlockCorruptError(
            f"block {block_id} at {location} is corrupt: its header names block {header.get('block_id')!r}"
        )
    return Block(int(header["stream_id"]), block_id, records, header["offset_ranges"], tuple(bad))


def _path_of_url(url: str, what: str) -> Path:
    """``file:///abs`` → /abs; ``file://./rel`` or ``file://rel`` → relative to the working directory."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise BlockStoreError(f"{what} {url!r} is not a file:// URL")
    path = unquote(parsed.netloc + parsed.path)
    if not path:
        raise BlockStoreError(f"{what} {url!r} names no directory")
    return Path(path).absolute()


class FileBlockStore:
    """Blocks as files ``<root>/stream-<id>/<block_id>.blk``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        self.url = file_store_url(self.root)
        self._known_dirs: set[Path] = set()

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, Any] | None = None) -> FileBlockStore:
        """The ``file`` scheme's factory: ``file:///abs/path`` or ``file://./relative`` (made absolute now)."""
        if options:
            raise BlockStoreError(
                f"block store {url}: a file:// store takes no options (block_store.options are for the other stores)"
            )
        return cls(_path_of_url(url, "block store URL"))

    def _dir(self, stream_id: int) -> Path:
        return self.root / f"stream-{stream_id}"

    def location_of(self, stream_id: int, block_id: str) -> str:
        return (self._dir(stream_id) / f"{block_id}.blk").as_uri()

    def _ensure_dir(self, directory: Path) -> None:
        if directory in self._known_dirs:
            return
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        if created:  # the new directory entry itself must survive a crash
            fsync_dir(directory.parent)
        self._known_dirs.add(directory)

    def encode(self, block: Block) -> list[bytes]:
        """The block's bytes (CPU only). A receiver calls this on its event loop: encoding in a
        thread would fight the fetch loop for the GIL and stall the push pipeline."""
        return encode_block(block, self.location_of(block.stream_id, block.block_id))

    def write_encoded(self, stream_id: int, block_id: str, parts: list[bytes]) -> str:
        """Durably write encoded bytes (I/O only, GIL mostly released: fit for ``asyncio.to_thread``)."""
        directory = self._dir(stream_id)
        final = directory / f"{block_id}.blk"
        try:
            self._ensure_dir(directory)
            atomic_write(final, parts)
        except OSError as exc:
            raise BlockStoreError(
                f"block {block_id} could not be written to {final.as_uri()}: {exc.strerror or exc}"
            ) from exc
        return final.as_uri()

    def write(self, block: Block) -> str:
        return self.write_encoded(block.stream_id, block.block_id, self.encode(block))

    def _contained(self, location: str) -> tuple[Path, str]:
        """The path of one of this store's block locations and the block id; LocationRefused for a
        location outside the store (a symlinked stream directory included)."""
        stream_id, block_id = split_location(self.url, location)
        directory = self._dir(stream_id)
        if os.path.realpath(directory) != os.path.join(os.path.realpath(self.root), directory.name):
            raise LocationRefused(
                f"block {block_id} at {location} is refused: {directory} leads outside the block store {self.url}"
            )
        return directory / f"{block_id}.blk", block_id

    def read(self, location: str) -> Block:
        path, block_id = self._contained(location)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            raise BlockMissingError(f"block {block_id} is missing: no file at {location}") from None
        except OSError as exc:
            if os.path.islink(path):
                raise LocationRefused(f"block {block_id} at {location} is refused: it is a symbolic link") from None
            raise BlockStoreError(f"block {block_id} at {location} cannot be read: {exc.strerror or exc}") from exc
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BLOCK_BYTES:
                raise LocationRefused(
                    f"block {block_id} at {location} is refused: not a regular file of at most {MAX_BLOCK_BYTES} bytes"
                )
            try:
                data = fh.read(st.st_size + 1)  # not MAX_BLOCK_BYTES: read(n) allocates n bytes first
            except OSError as exc:
                raise BlockStoreError(f"block {block_id} at {location} cannot be read: {exc.strerror or exc}") from exc
        return decode_block(data, block_id, location)

    def stored_blocks(self, stream_id: int, prefix: str) -> list[StoredBlock]:
        """The stream's block files whose id starts with ``prefix`` (none: no directory yet)."""
        directory = self._dir(stream_id)
        found = []
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.name.startswith(prefix) and entry.name.endswith(".blk") and entry.is_file():
                        modified = entry.stat(follow_symlinks=False).st_mtime
                        block_id = entry.name.removesuffix(".blk")
                        found.append(StoredBlock(block_id, (directory / entry.name).as_uri(), modified))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise BlockStoreError(f"listing {directory.as_uri()} failed: {exc.strerror or exc}") from exc
        return found

    def delete(self, location: str) -> None:
        path, block_id = self._contained(location)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise LocationRefused(f"block {block_id} at {location} is refused for deletion: not a regular file")
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise BlockStoreError(f"block {block_id} at {location} cannot be deleted: {exc.strerror or exc}") from exc


def store_root(url: str) -> str:
    """A configured store URL as locations start with it: a ``file://`` one absolute, no trailing ``/``."""
    if urlparse(url).scheme == "file":
        return file_store_url(_path_of_url(url, "block store URL"))
    return url.rstrip("/")


def check_location(location: str, stream_id: int, block_id: str, roots: Sequence[str] = ()) -> str:
    """``location`` when it is ``<root>/stream-<stream_id>/<block_id>.blk`` for one of ``roots`` (store
    URLs as :func:`store_root` gives them); :class:`LocationRefused` naming what is wrong otherwise.

    The scheme must be one a registered block store has (a task never contacts a host through a
    scheme no store was meant to use).  Without ``roots`` any such store URL is allowed, but the
    shape still holds: the name is the block's own
    (a safe id), under its stream's directory, and the store URL has no ``.``/``..`` segment, query or
    fragment; a ``file://`` store is an absolute local path.  Lexical only: it needs no access to the
    store (the tracker may not see it); readers and deleters check the file itself as well.
    """
    suffix = f"/stream-{stream_id}/{block_id}.blk"
    if not _SAFE_ID.match(block_id) or not location.endswith(suffix):
        raise LocationRefused(
            f"block {block_id!r:.80} location {location!r:.300} is refused: it must be "
            f"<block store URL>/stream-{stream_id}/<block id>.blk"
        )
    root = location[: -len(suffix)]
    scheme = urlparse(root).scheme
    if scheme not in registry("sluice_register_block_stores").available():
        raise LocationRefused(
            f"block {block_id} location {location!r:.300} is refused: its scheme {scheme!r} is not one "
            "of a registered block store"
        )
    if roots:
        if root not in roots:
            raise LocationRefused(
                f"block {block_id} location {location!r:.300} is refused: it is not inside the "
                f"block store {' or '.join(roots)}"
            )
        return location
    parsed = urlparse(root)
    segments = unquote(parsed.path).split("/")
    if (
        not parsed.scheme
        or parsed.query
        or parsed.fragment
        or parsed.params
        or "\\" in root
        or any(seg in (".", "..") for seg in segments)
        or (parsed.scheme == "file" and (parsed.netloc or not parsed.path.startswith("/")))
    ):
        raise LocationRefused(
            f"block {block_id} location {location!r:.300} is refused: its store URL {root!r:.200} "
            "is not a plain store URL (scheme, absolute path, no '.', '..', query or fragment)"
        )
    return location


def split_location(store_url: str, location: str) -> tuple[int, str]:
    """(stream id, block id) of a location inside the store at ``store_url``; LocationRefused otherwise."""
    stream, _, name = location.removeprefix(store_url + "/").partition("/")
    sid = stream.removeprefix("stream-")
    if not (location.startswith(store_url + "/") and sid.isdigit() and len(sid) < 12):
        raise LocationRefused(
            f"block location {location!r:.300} is refused: it is not inside the block store {store_url}"
        )
    block_id = name.removesuffix(".blk")
    check_location(location, int(sid), block_id, (store_url,))
    return int(sid), block_id


def file_store_url(directory: str | os.PathLike[str]) -> str:
    """The ``file://`` URL of a local directory, a relative one made absolute now: the URL travels
    to other processes (receivers, Spark tasks) that resolve it from their own working directory,
    and ``Path.as_uri`` refuses relative paths."""
    return Path(directory).absolute().as_uri()


def open_block_store(url: str, options: Mapping[str, Any] | None = None) -> BlockStore:
    """The store for ``url``, chosen by its scheme among the registered block stores; ``options`` (the
    ``[block_store.options]`` table) go to its factory when there are any."""
    scheme = urlparse(url).scheme
    try:
        registration = registry("sluice_register_block_stores").lookup(scheme)
    except UnknownNameError as exc:
        raise BlockStoreError(f"block store URL {url!r}: {exc}") from None
    if not options:
        return registration.factory(url)
    try:
        return registration.factory(url, dict(options))
    except TypeError as exc:
        raise BlockStoreError(
            f"block store {url}: the {scheme} store of {registration.describe()} takes no options ({exc})"
        ) from None


def store_url_of(location: str) -> str:
    """The URL of the store holding the block at ``location`` (``<store>/stream-<id>/<block>``)."""
    parts = location.rsplit("/", 2)
    if len(parts) != 3 or "://" not in parts[0] or not parts[1].startswith("stream-"):
        raise LocationRefused(f"block location {location!r:.300} is refused: it is not <store URL>/stream-<id>/<block>")
    return parts[0]


def read_block(location: str, options: Mapping[str, Any] | None = None) -> Block:
    """Read a block by its location alone (the store is the one the location lies in)."""
    return open_block_store(store_url_of(location), options).read(location)
