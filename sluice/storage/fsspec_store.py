"""Blocks in an object store or a remote filesystem, through fsspec: ``s3://bucket/prefix`` (s3fs),
``gs://`` (gcsfs), ``abfs://`` (adlfs), ``hdfs://`` (pyarrow), any protocol whose package is installed.

The layout is the file store's, ``<url>/stream-<id>/<block_id>.blk``, and a location is that full URL,
so a Spark task reads a block from its location and the options the driver ships with the block RDD.

- Publishing: one ``pipe_file`` per block.  On an object store that is one PUT (or a multipart upload
  completed at the end), which is atomic: the object exists whole or not at all, so there is no
  temporary name and no rename (an object store has no atomic rename).  The receiver reports a block
  to the tracker only after the write returned, so a block is never acknowledged before its object
  exists; a partial file a crashed writer may leave on a filesystem store is never acknowledged, so
  never read (and its size and CRC would not match).
- Write, read and delete name their objects; the one listing is a receiver's, of its own ids, at
  its start and then every ``receiver.orphan_grace_ms`` (:meth:`FsspecBlockStore.stored_blocks`;
  s3fs lists the parent too when the stream's prefix holds nothing, to tell empty from missing).
  s3fs reads with one GET (``max_concurrency=1``: otherwise it asks for the size first, and a
  missing object then costs a listing too).
- Deletes of the blocks a completed batch let go are one ``rm`` of the whole list (S3's
  DeleteObjects, 1000 keys a request); deleting a block that is already gone is not an error.
- Every store call is retried with exponential backoff, on top of the client library's own retries
  (botocore's, for S3); the last failure surfaces as :class:`BlockStoreError` naming the block, the
  URL and the cause.  A missing object is not retried.
- Credentials and endpoint: whatever the protocol's library reads (for S3 botocore's chain: the
  ``AWS_*`` variables, ``AWS_ENDPOINT_URL``, ``~/.aws`` profiles, instance roles) plus ``options``,
  the ``[block_store.options]`` table, passed to the filesystem unchanged (``endpoint_url``,
  ``key``/``secret``, ``client_kwargs``, ...).  :func:`task_options` is what a driver ships to tasks.

fsspec and the protocol's package are imported when a store is opened, never by ``sluice.storage``
itself, so a ``file://`` deployment needs neither.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlsplit

from sluice.storage.block_store import (
    Block,
    BlockMissingError,
    BlockStoreError,
    StoredBlock,
    decode_block,
    encode_block,
    split_location,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

# The driver's environment variables a task needs to reach an S3 store, as s3fs options.  Spark's
# spark-submit forwards the same variables to S3A; a profile or an instance role is not shipped:
# tasks read their own, where they run.
_AWS_ENV_OPTIONS = (("AWS_ACCESS_KEY_ID", "key"), ("AWS_SECRET_ACCESS_KEY", "secret"), ("AWS_SESSION_TOKEN", "token"))
_AWS_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
_AWS_REGION_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION")
_S3_SCHEMES = ("s3", "s3a")
# Object stores: the first segment of the path is a bucket (container), which a write never creates.
_BUCKET_SCHEMES = (*_S3_SCHEMES, "gs", "gcs", "abfs", "az", "adl", "oci", "oss")
# fsspec's protocols for object stores and writable remote filesystems, registered as block stores
# without importing fsspec (its package must be installed to open one); another protocol is one
# plugin away: register its scheme with FsspecBlockStore as the factory.
FSSPEC_SCHEMES = (
    "s3",
    "s3a",
    "gs",
    "gcs",
    "abfs",
    "az",
    "adl",
    "hdfs",
    "webhdfs",
    "dbfs",
    "oci",
    "oss",
    "sftp",
    "smb",
    "webdav",
    "lakefs",
)


def _modified(entry: Mapping[str, Any]) -> float | None:
    """An fsspec listing entry's last write time in seconds since the epoch, if it has one."""
    for key in ("LastModified", "mtime", "last_modified", "updated", "created"):
        value = entry.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, datetime):
            return value.timestamp()
    return None


def _scheme(url: str) -> str:
    return urlsplit(url).scheme.lower()


def task_options(
    url: str, options: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The storage options a Spark task on another host needs to open the store at ``url``.

    ``options`` (the ``[block_store.options]`` table) travel as they are.  For ``s3://`` the
    driver's ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, endpoint
    (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``) and region are added where the table does not
    set them, so executors need nothing but Sluice installed.
    """
    shipped = dict(options or {})
    if _scheme(url) not in _S3_SCHEMES or shipped.get("anon"):
        return shipped
    environ = os.environ if environ is None else environ
    has_keys = environ.get("AWS_ACCESS_KEY_ID") and environ.get("AWS_SECRET_ACCESS_KEY")
    if has_keys and not {"key", "secret", "token", "profile"} & set(shipped):
        for variable, option in _AWS_ENV_OPTIONS:
            if environ.get(variable):
                shipped[option] = environ[variable]
    endpoint = next((environ[v] for v in _AWS_ENDPOINT_ENV if environ.get(v)), None)
    if endpoint and "endpoint_url" not in shipped and "endpoint_url" not in shipped.get("client_kwargs", {}):
        shipped["endpoint_url"] = endpoint
    region = next((environ[v] for v in _AWS_REGION_ENV if environ.get(v)), None)
    if region and "region_name" not in shipped.get("client_kwargs", {}):
        shipped["client_kwargs"] = {**shipped.get("client_kwargs", {}), "region_name": region}
    return shipped


def _cause(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class FsspecBlockStore:
    """Blocks as objects ``<url>/stream-<id>/<block_id>.blk`` on an fsspec filesystem.

    :param url: the store, ``protocol://bucket-or-host/prefix``.
    :param options: storage options passed to fsspec (the ``[block_store.options]`` table).
    :param attempts: tries of each store call before it fails.
    :param backoff_s: wait after the first failed try; doubled after each further one.
    """

    def __init__(
        self, url: str, options: Mapping[str, Any] | None = None, *, attempts: int = 3, backoff_s: float = 0.5
    ) -> None:
        self.url = url.rstrip("/")
        self.options = dict(options or {})
        self.attempts = attempts
        self.backoff_s = backoff_s
        protocol = _scheme(self.url)
        try:
            # fsspec is optional: only fsspec:// stores need it
            import fsspec
        except ImportError:
            raise BlockStoreError(
                f"block store {self.url}: {protocol}:// stores need fsspec, which is not installed "
                "(pip install 'sluice-streaming[s3]' for s3://)"
            ) from None
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url, **self.options)
        except ImportError as exc:
            raise BlockStoreError(
                f"block store {self.url}: the {protocol}:// protocol needs a package that is not installed: {exc}"
            ) from None
        except (ValueError, TypeError) as exc:
            raise BlockStoreError(f"block store {self.url} cannot be opened: {_cause(exc)}") from None
        self._root = root.rstrip("/")
        if not self._root:
            raise BlockStoreError(f"block store {self.url} names no bucket or directory")
        protocols = (self.fs.protocol,) if isinstance(self.fs.protocol, str) else tuple(self.fs.protocol)
        self._read_kwargs = {"max_concurrency": 1} if set(protocols) & set(_S3_SCHEMES) else {}

    @property
    def bucket(self) -> str | None:
        """The bucket (container) the blocks go to, for an object store; ``None`` otherwise."""
        return self._root.split("/", 1)[0] if _scheme(self.url) in _BUCKET_SCHEMES else None

    def check(self) -> None:
        """Fail now, naming the URL and the bucket, when the bucket does not exist or cannot be
        reached: otherwise every block write fails and a receiver retries it for ever."""
        if self.bucket is None:
            return
        try:
            exists = self.fs.exists(self.bucket)
        except Exception as exc:  # noqa: BLE001 - credentials, endpoint, network: all stop the start
            raise BlockStoreError(
                f"block store {self.url}: bucket {self.bucket!r} cannot be reached: {_cause(exc)}"
            ) from None
        if not exists:
            raise BlockStoreError(f"block store {self.url}: bucket {self.bucket!r} does not exist; create it first")

    def location_of(self, stream_id: int, block_id: str) -> str:
        return f"{self.url}/stream-{stream_id}/{block_id}.blk"

    def _path(self, location: str) -> str:
        """The filesystem path of one of this store's locations; a foreign location is refused."""
        split_location(self.url, location)
        return self._root + location[len(self.url) :]

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                return call()
            except FileNotFoundError:
                raise
            except Exception as exc:  # any client error is retried, then surfaces with the URL
                if attempt == self.attempts:
                    raise BlockStoreError(f"{what} failed after {attempt} attempts: {_cause(exc)}") from exc
                log.warning(
                    "%s failed (attempt %d of %d), retrying in %.1f s: %s",
                    what,
                    attempt,
                    self.attempts,
                    delay,
                    _cause(exc),
                )
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def encode(self, block: Block) -> list[bytes]:
        """The block's bytes (CPU only, on the receiver's event loop)."""
        return encode_block(block, self.location_of(block.stream_id, block.block_id))

    def write_encoded(self, stream_id: int, block_id: str, parts: list[bytes]) -> str:
        """One PUT of the whole block (blocking I/O: run it in a thread); returns the location."""
        location = self.location_of(stream_id, block_id)
        path = self._path(location)
        data = b"".join(parts)
        try:
            self._retrying(f"writing block {block_id} to {location}", lambda: self.fs.pipe_file(path, data))
        except FileNotFoundError as exc:  # no bucket (or parent directory): the store, not the block
            where = f"bucket {self.bucket!r}" if self.bucket else "its directory"
            raise BlockStoreError(
                f"writing block {block_id} to {location} failed: {where} of block store {self.url} does not "
                f"exist ({_cause(exc)})"
            ) from None
        return location

    def write(self, block: Block) -> str:
        return self.write_encoded(block.stream_id, block.block_id, self.encode(block))

    def read(self, location: str) -> Block:
        block_id = location.rsplit("/", 1)[-1].removesuffix(".blk")
        path = self._path(location)
        try:
            data = self._retrying(
                f"reading block {block_id} from {location}", lambda: self.fs.cat_file(path, **self._read_kwargs)
            )
        except FileNotFoundError:
            raise BlockMissingError(f"block {block_id} is missing: no object at {location}") from None
        return decode_block(data, block_id, location)

    def stored_blocks(self, stream_id: int, prefix: str) -> list[StoredBlock]:
        """The stream's objects whose block id starts with ``prefix``, each with its last write time
        (S3's ``LastModified``, a filesystem's ``mtime``); one without a time is left out (never
        judged old).  The listing is fresh, not fsspec's cached one."""
        directory = f"{self.url}/stream-{stream_id}"
        root = self._root + directory[len(self.url) :]
        try:
            entries = self._retrying(f"listing {directory}", lambda: self.fs.ls(root, detail=True, refresh=True))
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            name = str(entry.get("name", "")).rstrip("/").rsplit("/", 1)[-1]
            modified = _modified(entry)
            if entry.get("type") == "file" and name.startswith(prefix) and name.endswith(".blk") and modified:
                found.append(StoredBlock(name.removesuffix(".blk"), f"{directory}/{name}", modified))
        return found

    def delete(self, location: str) -> None:
        self.delete_many([location])

    def delete_many(self, locations: list[str]) -> None:
        """Delete blocks in one bulk request where the protocol has one; gone already is fine."""
        if not locations:
            return
        paths = [self._path(location) for location in locations]
        what = f"deleting {len(paths)} block(s) from {self.url}"
        try:
            self._retrying(what, lambda: self.fs.rm(paths))
        except FileNotFoundError:  # a filesystem that refuses to remove a missing path: one by one
            for path in paths:
                try:
                    self._retrying(what, partial(self.fs.rm_file, path))
                except FileNotFoundError:
                    pass
