"""Public ids: `job_<32 hex>`, `voice_<32 hex>`, `lexicon_<32 hex>` and `cons_<32 hex>` (voice
consents) over the rows' UUIDs."""

import uuid

JOB, VOICE, LEXICON, CONSENT = "job_", "voice_", "lexicon_", "cons_"


def job_id(key: uuid.UUID) -> str:
    """Return a job's public id."""
    return f"{JOB}{key.hex}"


def voice_id(key: uuid.UUID) -> str:
    """Return an uploaded voice's public id."""
    return f"{VOICE}{key.hex}"


def lexicon_id(key: uuid.UUID) -> str:
    """Return a lexicon's public id."""
    return f"{LEXICON}{key.hex}"


def consent_id(key: uuid.UUID) -> str:
    """Return a voice consent's public id."""
    return f"{CONSENT}{key.hex}"


def parse(public: str, prefix: str) -> uuid.UUID:
    """Return the UUID behind a public id of `prefix` (also taken bare); ValueError if none."""
    return uuid.UUID(hex=public.removeprefix(prefix))
