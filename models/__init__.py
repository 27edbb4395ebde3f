"""SQLAlchemy data model: jobs, segments, events, and the engine/session factories."""

from models.api_key import ApiKey
from models.base import Base, utcnow, uuid7
from models.fragments import Fragment
from models.job import (
    ACTIVE,
    Job,
    JobEvent,
    JobStatus,
    Segment,
    SegmentEvent,
    SegmentStatus,
)
from models.lexicon import Lexicon
from models.usage import Charge, KeyLock
from models.voice import Voice, VoiceConsent
from models.worker import WorkerBeat

__all__ = [
    "ACTIVE", "ApiKey", "Base", "Charge", "Fragment", "Job", "JobEvent", "JobStatus", "KeyLock",
    "Lexicon", "Segment", "SegmentEvent", "SegmentStatus", "Voice", "VoiceConsent", "WorkerBeat",
    "utcnow", "uuid7",
]
