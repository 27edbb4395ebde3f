"""MediaStore: put, open, url, delete over fsspec (file:// and s3://)."""

import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import IO, Any

import fsspec
from botocore.exceptions import BotoCoreError
from fsspec.core import url_to_fs

from storage.settings import StorageSettings, get_settings


class StorageUnavailable(OSError):
    """The media store could not be reached, or failed the operation (not a missing key)."""


class StorageRefused(StorageUnavailable, PermissionError):
    """The media store refused the operation: credentials or permissions."""


@contextmanager
def _reaching(action: str, key: str) -> Iterator[None]:
    """Raise StorageUnavailable for what a storage outage raises; a missing key stays
    FileNotFoundError (s3fs maps S3 answers to OSError, unreachable servers to botocore's)."""
    try:
        yield
    except FileNotFoundError:
        raise
    except PermissionError as exc:
        raise StorageRefused(f"storage refused to {action} {key!r}: {exc}") from exc
    except (OSError, BotoCoreError) as exc:
        raise StorageUnavailable(f"storage could not {action} {key!r}: {exc}") from exc


class MediaStore:
    """Media under one root URL; keys are relative, '/'-separated and never hold raw user input."""

    def __init__(self, root: str, *, public_base_url: str = "", s3_endpoint_url: str = "",
                 s3_region: str = "us-east-1", s3_key: str = "", s3_secret: str = "",
                 presign_expires: int = 3600) -> None:
        options: dict[str, Any] = {}
        self.is_s3 = root.startswith("s3://")
        if self.is_s3:
            client: dict[str, Any] = {"region_name": s3_region}
            if s3_endpoint_url:
                client["endpoint_url"] = s3_endpoint_url
            options = {
                "client_kwargs": client,
                # Fail in seconds, not minutes, when the server is down: the task retries.
                "config_kwargs": {"signature_version": "s3v4", "connect_timeout": 5,
                                  "read_timeout": 60,
                                  "retries": {"max_attempts": 3, "mode": "standard"}},
                "skip_instance_cache": True,
                "use_listings_cache": False,  # another process may have written since
            }
            if s3_key:
                options |= {"key": s3_key, "secret": s3_secret}
        fs, path = url_to_fs(root, **options)
        self.fs: fsspec.AbstractFileSystem = fs
        self.root = path.rstrip("/")
        self.root_url = root.rstrip("/")
        self.public_base_url = public_base_url.rstrip("/")
        self.presign_expires = presign_expires
        if not self.is_s3:
            self.fs.makedirs(self.root, exist_ok=True)

    def path(self, key: str) -> str:
        """Return the filesystem path of `key`."""
        clean = posixpath.normpath(key).lstrip("/")
        if clean.startswith(".."):
            raise ValueError(f"storage key escapes the root: {key!r}")
        return f"{self.root}/{clean}"

    def put(self, key: str, data: bytes) -> None:
        """Write `data` at `key`."""
        with _reaching("write", key):
            if not self.is_s3:
                self.fs.makedirs(posixpath.dirname(self.path(key)), exist_ok=True)
            self.fs.pipe_file(self.path(key), data)

    def put_file(self, local_path: str, key: str) -> None:
        """Upload a local file to `key`."""
        with _reaching("write", key):
            if not self.is_s3:
                self.fs.makedirs(posixpath.dirname(self.path(key)), exist_ok=True)
            self.fs.put_file(local_path, self.path(key))

    def open(self, key: str, mode: str = "rb") -> IO[bytes]:
        """Open `key` for streaming reads (or writes)."""
        with _reaching("open", key):
            f: IO[bytes] = self.fs.open(self.path(key), mode)
        return f

    def get(self, key: str) -> bytes:
        """Read `key` whole."""
        with _reaching("read", key):
            data: bytes = self.fs.cat_file(self.path(key))
        return data

    def move(self, source: str, target: str) -> None:
        """Move `source` to `target` (a rename on a disk, a server-side copy on S3)."""
        with _reaching("move", source):
            if not self.is_s3:
                self.fs.makedirs(posixpath.dirname(self.path(target)), exist_ok=True)
            self.fs.mv(self.path(source), self.path(target))

    def exists(self, key: str) -> bool:
        """Say whether `key` exists."""
        with _reaching("look up", key):
            return bool(self.fs.exists(self.path(key)))

    def size(self, key: str) -> int:
        """Return the size of `key` in bytes."""
        with _reaching("look up", key):
            return int(self.fs.size(self.path(key)))

    def delete(self, prefix: str) -> None:
        """Delete `prefix` and everything under it; missing keys are fine."""
        path = self.path(prefix)
        with _reaching("delete", prefix):
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)

    def check(self) -> None:
        """Raise if the store cannot be reached."""
        if self.is_s3:
            self.fs.info(self.root.split("/", 1)[0])  # HEAD bucket: cheap, however full it is
        else:
            self.fs.ls(self.root, detail=False)

    def url(self, key: str, *, local_url: str) -> str:
        """Render a URL for `key`: public base, presigned S3 (SigV4), or the API's `local_url`."""
        if self.public_base_url:
            return f"{self.public_base_url}/{key}"
        if self.is_s3:
            url: str = self.fs.url(self.path(key), expires=self.presign_expires)
            return url
        return local_url


def store_from_settings(settings: StorageSettings, root: str | None = None) -> MediaStore:
    """Build a store for `root` (default: the configured storage URL) with the S3 options."""
    return MediaStore(
        root or settings.media_url,
        public_base_url="" if root else settings.public_base_url,
        s3_endpoint_url=settings.s3_endpoint_url,
        s3_region=settings.s3_region,
        s3_key=settings.s3_access_key_id,
        s3_secret=settings.s3_secret_access_key,
        presign_expires=settings.presign_expires_seconds,
    )


@lru_cache(maxsize=16)
def store_for(root: str | None = None) -> MediaStore:
    """Return the process-wide store for `root` (default: the platform's storage)."""
    return store_from_settings(get_settings(), root)
