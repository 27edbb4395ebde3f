"""MediaStore against a real S3 server over HTTP and a local folder."""

import time
from pathlib import Path

import httpx
import pytest

from storage import MediaStore


@pytest.fixture
def s3_store(s3: dict[str, str]) -> MediaStore:
    return MediaStore(f"s3://{s3['bucket']}/store-test", s3_endpoint_url=s3["endpoint"],
                      s3_key=s3["key"], s3_secret=s3["secret"], presign_expires=60)


def test_s3_put_open_delete_round_trip(s3_store: MediaStore, tmp_path: Path) -> None:
    s3_store.put("jobs/a/one.bin", b"hello")
    local = tmp_path / "big.bin"
    local.write_bytes(b"x" * 3_000_000)
    s3_store.put_file(str(local), "jobs/a/two.bin")
    with s3_store.open("jobs/a/one.bin") as f:
        assert f.read() == b"hello"
    assert s3_store.size("jobs/a/two.bin") == 3_000_000
    s3_store.delete("jobs/a")
    assert not s3_store.exists("jobs/a/one.bin")
    assert not s3_store.exists("jobs/a/two.bin")
    s3_store.check()


def test_presigned_url_is_sigv4_and_the_server_enforces_it(s3: dict[str, str],
                                                           s3_store: MediaStore) -> None:
    s3_store.put("signed/file.txt", b"signed content")
    url = s3_store.url("signed/file.txt", local_url="unused")
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url
    assert httpx.get(url).content == b"signed content"
    assert httpx.get(url.replace("X-Amz-Signature=", "X-Amz-Signature=0")).status_code == 403
    assert httpx.get(f"{s3['endpoint']}/{s3['bucket']}/store-test/signed/file.txt"
                     ).status_code == 403
    short = MediaStore(f"s3://{s3['bucket']}/store-test", s3_endpoint_url=s3["endpoint"],
                       s3_key=s3["key"], s3_secret=s3["secret"], presign_expires=1)
    expired = short.url("signed/file.txt", local_url="unused")
    time.sleep(2.5)
    assert httpx.get(expired).status_code == 403


def test_wrong_credentials_are_refused(s3: dict[str, str]) -> None:
    store = MediaStore(f"s3://{s3['bucket']}/x", s3_endpoint_url=s3["endpoint"],
                       s3_key=s3["key"], s3_secret="wrong-secret")
    with pytest.raises(PermissionError):
        store.put("k", b"v")


def test_url_rendering_public_base_then_local(tmp_path: Path) -> None:
    public = MediaStore(str(tmp_path), public_base_url="https://cdn.example.com/media/")
    assert public.url("jobs/1/audio.mp3", local_url="L") == \
        "https://cdn.example.com/media/jobs/1/audio.mp3"
    local = MediaStore(str(tmp_path))
    assert local.url("jobs/1/audio.mp3", local_url="http://api/content") == "http://api/content"


def test_local_store_keeps_keys_inside_its_root(tmp_path: Path) -> None:
    store = MediaStore(str(tmp_path / "root"))
    store.put("jobs/x/a.txt", b"a")
    assert (tmp_path / "root" / "jobs" / "x" / "a.txt").read_bytes() == b"a"
    with pytest.raises(ValueError, match="escapes"):
        store.put("../outside.txt", b"no")
    assert not (tmp_path / "outside.txt").exists()
