"""Every output says it is synthetic, in its container's own metadata, read back with
mutagen and with FFmpeg (PyAV): sync answers, a streamed WAV's header and a job's files."""

import io
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
import pytest
from mutagen import File as MutagenFile
from mutagen.flac import FLAC
from mutagen.mp3 import MP3
from mutagen.mp4 import MP4
from mutagen.oggopus import OggOpus

from core import c2pa_manifest
from core.audio import decode, encode
from core.marking import STATEMENT, Provenance, mark_bytes, mark_file, riff_info
from tests.support import Stack, embedded, wait_job

MADE = Provenance("kokoro", "jm_kumo", "job_0123")


def ffmpeg_metadata(data: bytes) -> dict[str, str]:
    """The container's and the audio stream's metadata as FFmpeg reads them."""
    with av.open(io.BytesIO(data)) as container:
        return dict(container.metadata) | dict(container.streams.audio[0].metadata)


def assert_marked(data: bytes, fmt: str, made: Provenance) -> None:
    """The fields of `made` and the statement are in `data`, as each reader sees them."""
    found = ffmpeg_metadata(data)
    if fmt == "wav":  # RIFF INFO: FFmpeg maps ICMT to comment, ISFT to encoder
        assert found["comment"].startswith(STATEMENT)
        assert f"model={made.model}; voice={made.voice}" in found["comment"]
        assert found["encoder"].startswith("Narrator")
        return
    for key, value in made.fields().items():
        assert found[key] == value, (fmt, key, found)
    reader = {"mp3": MP3, "m4b": MP4, "flac": FLAC, "opus": OggOpus}[fmt]
    tags: Any = reader(io.BytesIO(data)).tags  # a signed FLAC starts with an ID3 tag
    if fmt == "m4b":
        assert bytes(tags["----:org.narrator:AI_GENERATED"][0]) == b"true"
        assert tags["\xa9too"][0].startswith("Narrator")
    elif fmt == "mp3":
        assert tags["TXXX:AI_GENERATED"].text == ["true"]
        assert tags["COMM:AI-generated:eng"].text[0].startswith(STATEMENT)
    else:
        assert tags["AI_GENERATED"] == ["true"]
        assert tags["COMMENT"][0].startswith(STATEMENT)


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3", "opus"])
def test_each_format_carries_the_marks_and_the_same_audio(fmt: str) -> None:
    audio = (0.2 * np.sin(np.arange(24000) / 9)).astype(np.float32)
    plain = encode(audio, 24000, fmt)
    marked = mark_bytes(plain, fmt, MADE)
    assert_marked(marked, fmt, MADE)
    assert np.array_equal(decode(plain)[0], decode(marked)[0])


def test_formats_without_metadata_are_left_as_they_are() -> None:
    audio = np.zeros(2400, dtype=np.float32)
    for fmt in ("pcm", "aac"):
        data = encode(audio, 24000, fmt)
        assert mark_bytes(data, fmt, MADE) == data


def test_a_wav_file_gets_info_and_id3_without_its_samples_rewritten(tmp_path: Any) -> None:
    audio = (0.2 * np.sin(np.arange(48001) / 7)).astype(np.float32)
    path = tmp_path / "book.wav"
    path.write_bytes(encode(audio, 24000, "wav"))
    before = path.read_bytes()
    mark_file(path, "wav", MADE)
    after = path.read_bytes()
    assert after[8:len(before)] == before[8:]  # appended: the samples stay where they were
    assert_marked(after, "wav", MADE)
    tags: Any = MutagenFile(path).tags
    assert tags["TXXX:JOB_ID"].text == ["job_0123"]
    assert np.array_equal(decode(before)[0], decode(after)[0])


def test_the_info_chunk_keeps_riff_alignment() -> None:
    for voice in ("a", "ab", "abc"):  # odd and even text lengths
        chunk = riff_info(Provenance("m", voice))
        assert len(chunk) % 2 == 0
        assert int.from_bytes(chunk[4:8], "little") == len(chunk) - 8


def test_sync_answers_streamed_wav_and_job_files_are_marked(local_stack: Stack) -> None:
    with local_stack.client() as http:
        for fmt in ("mp3", "wav", "flac", "opus"):
            answer = http.post("/v1/audio/speech", json={"input": "Marked as synthetic.",
                                                         "response_format": fmt})
            assert answer.status_code == 200, answer.text
            assert_marked(answer.content, fmt, Provenance("piper", "joe"))
        with http.stream("POST", "/v1/audio/speech", json={
                "input": "Streamed, and marked.", "response_format": "wav",
                "stream_format": "audio"}) as stream:
            streamed = stream.read()
        assert b"LIST" in streamed[:400]
        assert_marked(streamed, "wav", Provenance("piper", "joe"))
        for fmt in ("mp3", "m4b", "wav"):
            job = http.post("/v1/audio/jobs", json={
                "response_format": fmt,
                "chapters": [{"title": "One", "input": "The first."},
                             {"title": "Two", "input": "The second."}]}).json()
            job = wait_job(http, job["id"])
            assert job["status"] == "completed", job
            made = Provenance("piper", "joe", job["id"])
            assert_marked(http.get(job["result"]["url"]).content, fmt, made)
            for chapter in job["result"]["chapters"]:
                assert_marked(http.get(chapter["url"]).content, fmt, made)


def ca_signed_key(folder: Path) -> tuple[Path, Path]:
    """Write a test CA's end-entity certificate chain and its key (C2PA refuses
    self-signed signers); return their paths."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common),
                          x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Narrator tests")])

    def usage(sign: bool, certs: bool) -> x509.KeyUsage:
        return x509.KeyUsage(digital_signature=sign, content_commitment=False,
                             key_encipherment=False, data_encipherment=False,
                             key_agreement=False, key_cert_sign=certs, crl_sign=certs,
                             encipher_only=False, decipher_only=False)

    def certificate(subject: str, key: Any, issuer: x509.Name, signing: Any,
                    ca: bool) -> x509.Certificate:
        built = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(issuer)
                 .public_key(key.public_key()).serial_number(x509.random_serial_number())
                 .not_valid_before(now - datetime.timedelta(days=1))
                 .not_valid_after(now + datetime.timedelta(days=30))
                 .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                 .add_extension(usage(not ca, ca), critical=True))
        if not ca:
            built = built.add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.EMAIL_PROTECTION]), critical=False).add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(signing.public_key()),
                critical=False).add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        return built.sign(signing, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("Narrator test CA", ca_key, name("Narrator test CA"), ca_key, True)
    leaf = certificate("Narrator test signer", key, ca.subject, ca_key, False)
    cert, pem = folder / "c2pa.pem", folder / "c2pa.key"
    cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM)
                     + ca.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return cert, pem


def assert_signed(data: bytes, fmt: str, made: Provenance) -> None:
    """A C2PA manifest says a generative model made it, and its signature checks out (the
    test CA is on no trust list: the credential is valid but untrusted)."""
    found = c2pa_manifest.read(data, fmt)
    actions = found["manifest"]["assertions"]
    created = next(a for a in actions if a["label"].startswith("c2pa.actions"))
    assert created["data"]["actions"][0]["digitalSourceType"] == c2pa_manifest.SOURCE_TYPE
    ours = next(a for a in actions if a["label"] == c2pa_manifest.ASSERTION)
    assert ours["data"] == made.fields()
    assert found["state"].endswith("Valid"), found
    assert {s["code"] for s in found["status"]} <= {"signingCredential.untrusted"}, found


@pytest.mark.parametrize("fmt", ["wav", "mp3", "flac"])
def test_a_c2pa_manifest_is_signed_after_the_marks_and_keeps_them(fmt: str,
                                                                    tmp_path: Path) -> None:
    cert, key = ca_signed_key(tmp_path)
    sign = c2pa_manifest.signer(str(cert), str(key), "es256")
    audio = (0.2 * np.sin(np.arange(240000) / 9)).astype(np.float32)  # 10 s: the middle
    marked = mark_bytes(encode(audio, 24000, fmt), fmt, MADE)
    signed = c2pa_manifest.sign_bytes(marked, fmt, MADE, sign)
    assert_signed(signed, fmt, MADE)
    assert_marked(signed, fmt, MADE)
    assert np.array_equal(decode(marked)[0], decode(signed)[0])
    tampered = bytearray(signed)
    tampered[len(signed) // 2] ^= 0xFF  # the audio changed after signing
    status = {s["code"] for s in c2pa_manifest.read(bytes(tampered), fmt)["status"]}
    assert any("mismatch" in code for code in status), status


def test_opus_is_left_unsigned(tmp_path: Path) -> None:
    cert, key = ca_signed_key(tmp_path)
    sign = c2pa_manifest.signer(str(cert), str(key), "es256")
    data = encode(np.zeros(4800, dtype=np.float32), 24000, "opus")
    assert c2pa_manifest.sign_bytes(data, "opus", MADE, sign) == data


def test_with_a_key_sync_answers_and_job_files_carry_a_signed_manifest(tmp_path: Path) -> None:
    cert, key = ca_signed_key(tmp_path)
    settings = {"NARRATOR_C2PA_CERT": str(cert), "NARRATOR_C2PA_KEY": str(key),
                "NARRATOR_SERVE_KOKORO": "false"}
    (tmp_path / "served").mkdir()
    with embedded(tmp_path / "served", settings) as (url, _), \
            httpx.Client(base_url=url, timeout=120) as http:
        answer = http.post("/v1/audio/speech", json={"input": "Signed speech.",
                                                     "response_format": "mp3"})
        assert answer.status_code == 200, answer.text
        assert_signed(answer.content, "mp3", Provenance("piper", "joe"))
        for fmt in ("m4b", "wav"):
            job = wait_job(http, http.post("/v1/audio/jobs", json={
                "response_format": fmt, "input": "A signed book."}).json()["id"])
            assert job["status"] == "completed", job
            made = Provenance("piper", "joe", job["id"])
            data = http.get(job["result"]["url"]).content
            assert_signed(data, fmt, made)
            assert_marked(data, fmt, made)
