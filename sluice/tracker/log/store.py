"""Where the tracker's log objects live: an S3 bucket, or a POSIX directory (a shared NFS mount).

A thin shell of six calls, each one request: put, put-if-absent, put-if-match, get, list, delete.
Everything the log decides (numbering, fences, recovery order) is in
:mod:`sluice.tracker.log.protocol`, tested on a directory without any server.

- S3 goes through botocore directly, not s3fs: the log needs ``If-None-Match: *`` for each log
  object and ``If-Match: <etag>`` for the lease. s3fs exposes only the first (``mode="create"``)
  and hides the ETag a write returns, which a compare-and-set needs next time.  Credentials,
  region and endpoint come from botocore's chain (``AWS_ENDPOINT_URL`` included), as for blocks.
- A directory creates each object whole under a temporary name, fsyncs it and ``link``\\ s it to
  its name: ``link`` fails when the name exists, atomically, on a local disk and on NFS (the same
  guarantee as ``O_EXCL``, with no moment at which a reader sees a partial object).  The lease's
  compare-and-set holds an ``flock`` on a lock file while it compares and replaces.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import uuid
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from sluice.durable import atomic_write, fsync_dir
from sluice.errors import SluiceError
from sluice.tracker.log.wal import WALCorruption


class PreconditionFailed(SluiceError, OSError):
    """A conditional write lost: the object exists (put-if-absent) or changed (put-if-match)."""


class ObjectTooLarge(WALCorruption):
    """An object in the log's prefix is larger than any the log writes there: refused before it is read,
    so a foreign write cannot make a tracker read gigabytes into memory.

    :param etag: the object's ETag, so a lease overwritten this way can still be compared and set.
    """

    def __init__(self, message: str, etag: str) -> None:
        super().__init__(message)
        self.etag = etag


class LogStoreError(SluiceError, ValueError):
    """A ``tracker.wal_dir`` URL this tracker cannot keep a log in."""


class ObjectStore(Protocol):
    """The six calls the log makes; keys are ``/``-separated names under the store's root."""

    url: str

    def put(self, key: str, data: bytes) -> None:
        """Create or replace ``key`` whole."""

    def put_if_absent(self, key: str, data: bytes) -> None:
        """Create ``key`` whole, or raise :class:`PreconditionFailed` when it exists."""

    def put_if_match(self, key: str, data: bytes, etag: str | None) -> str:
        """Replace ``key`` if its ETag is ``etag`` (``None``: create it if absent); return the new ETag."""

    def get(self, key: str, limit: int | None = None) -> tuple[bytes, str] | None:
        """The object and its ETag, or ``None`` when it does not exist; :class:`ObjectTooLarge`
        when it holds more than ``limit`` bytes (checked before its body is read)."""

    def keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix``, sorted."""

    def delete(self, keys: list[str]) -> None:
        """Delete ``keys``; a key already gone is not an error."""


def is_object_url(wal_dir: str) -> bool:
    """Whether ``tracker.wal_dir`` names an object log (a URL) rather than a local segment directory."""
    return "://" in wal_dir


def open_store(url: str, request_timeout_s: float | None = None) -> ObjectStore:
    """The store behind a ``tracker.wal_dir`` URL: ``s3://bucket/prefix`` or ``file:///path``.

    :param request_timeout_s: when given, each S3 request is one attempt that gives up after this
        long to connect and this long to read (the lease's requests: see :mod:`sluice.tracker.log.lease`).
    """
    parts = urlsplit(url)
    if parts.scheme in ("s3", "s3a"):
        if not parts.netloc:
            raise LogStoreError(f"tracker.wal_dir = {url!r}: an S3 log needs a bucket, s3://bucket/prefix")
        return S3Objects(url, parts.netloc, parts.path.strip("/"), request_timeout_s)
    if parts.scheme == "file":
        return DirectoryObjects(url, Path(parts.path))
    raise LogStoreError(
        f"tracker.wal_dir = {url!r}: a log URL must be s3://bucket/prefix or file:///path (a shared "
        "filesystem); a plain path keeps the local segment log"
    )


class DirectoryObjects:
    """Objects as files in a directory; put-if-absent through ``link``, compare-and-set under ``flock``."""

    def __init__(self, url: str, root: Path) -> None:
        self.url = url
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / key

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)

    def put_if_absent(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise PreconditionFailed(f"{self.url}/{key} exists") from None
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(path.parent)

    def put_if_match(self, key: str, data: bytes, etag: str | None) -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{key.replace('/', '_')}.lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = self.get(key)
            if (current[1] if current is not None else None) != etag:
                raise PreconditionFailed(f"{self.url}/{key} changed (expected ETag {etag})")
            atomic_write(path, data)
        return _etag(data)

    def get(self, key: str, limit: int | None = None) -> tuple[bytes, str] | None:
        try:
            with open(self._path(key), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if limit is not None and size > limit:  # its ETag without holding it: hashed in chunks
                    etag = hashlib.file_digest(f, "sha256").hexdigest()[:32]
                    _check_size(self.url, key, size, limit, etag)
                data = f.read()
        except FileNotFoundError:
            return None
        return data, _etag(data)

    def keys(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(
            str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file() and not p.name.startswith(".")
        )

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)


def _check_size(url: str, key: str, size: int, limit: int | None, etag: str) -> None:
    if limit is not None and size > limit:
        raise ObjectTooLarge(f"{url}/{key} holds {size} bytes, more than the {limit} an object there may hold", etag)


def _etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


class S3Objects:
    """Objects in an S3 bucket through botocore (one request per call, botocore's own retries).

    :param request_timeout_s: one attempt bounded by this to connect and to read, instead of two
        attempts of 2 s to connect and 5 s to read (the log's writes, which may carry a snapshot).
    """

    def __init__(self, url: str, bucket: str, prefix: str, request_timeout_s: float | None = None) -> None:
        # boto3 is optional: only an s3:// log needs it
        import boto3
        from botocore.config import Config

        self.url = url
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        # Short timeouts: a store that stops answering must surface as an error the log retries,
        # not a call that hangs past the lease.
        if request_timeout_s is None:
            config = Config(connect_timeout=2, read_timeout=5, retries={"total_max_attempts": 2, "mode": "standard"})
        else:
            t = request_timeout_s
            config = Config(connect_timeout=t, read_timeout=t, retries={"total_max_attempts": 1, "mode": "standard"})
        self.client: Any = boto3.session.Session().client("s3", config=config)  # built at run time: untyped
        if request_timeout_s is not None:
            # botocore waits up to 1 s for "100 Continue" before sending any PUT's body, beyond both
            # timeouts; a lease object is a few bytes, so it goes in one send
            from botocore.handlers import add_expect_header

            self.client.meta.events.unregister("before-call.s3", add_expect_header)

    def _key(self, key: str) -> str:
        return self.prefix + key

    def _put(self, key: str, data: bytes, **condition: str) -> str:
        # boto3 is optional: only an s3:// log needs it
        from botocore.exceptions import ClientError

        try:
            reply = self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **condition)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise PreconditionFailed(f"{self.url}/{key}: {exc}") from None
            raise
        return str(reply["ETag"])

    def put(self, key: str, data: bytes) -> None:
        self._put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> None:
        self._put(key, data, IfNoneMatch="*")

    def put_if_match(self, key: str, data: bytes, etag: str | None) -> str:
        return self._put(key, data, **({"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}))

    def get(self, key: str, limit: int | None = None) -> tuple[bytes, str] | None:
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except self.client.exceptions.NoSuchKey:
            return None
        try:
            _check_size(self.url, key, int(reply.get("ContentLength", 0)), limit, str(reply["ETag"]))
        except ObjectTooLarge:
            reply["Body"].close()  # the body is never read
            raise
        return reply["Body"].read(), str(reply["ETag"])

    def keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
            keys += [item["Key"][len(self.prefix) :] for item in page.get("Contents", [])]
        return sorted(keys)

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes 1000 keys a request
            objects = [{"Key": self._key(k)} for k in keys[start : start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})
