"""One MediaStore over fsspec for local folders and S3, with URL rendering."""

from botocore.exceptions import BotoCoreError

from storage.media import MediaStore, StorageUnavailable, store_for

# What a storage outage raises: fsspec maps S3 answers to OSError; a server that cannot be
# reached surfaces as botocore's connection errors.
STORAGE_ERRORS: tuple[type[Exception], ...] = (OSError, BotoCoreError)

__all__ = ["STORAGE_ERRORS", "MediaStore", "StorageUnavailable", "store_for"]
