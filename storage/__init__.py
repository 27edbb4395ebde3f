"""One MediaStore over fsspec for local folders and S3, with URL rendering."""

from storage.media import MediaStore, store_for

__all__ = ["MediaStore", "store_for"]
