"""Request bodies, validated by pydantic; limits that depend on settings are checked later."""

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from api.settings import get_settings
from api.values import check_metadata, check_storable
from core import lexicon
from core.catalog import ALIGNER_LANGUAGES, RECOGNIZER_LANGUAGES

Format = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
JobFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm", "m4b"]  # m4b: chapter marks
Subtitle = Literal["srt", "vtt", "words"]  # words: JSON word times (English, aligned)
# The recognition check (English): "flag" hears each segment back and flags the misheard ones;
# "retry" also synthesises those again with new seeds, up to QUALITY_RETRIES, keeping the best.
Verify = Literal["off", "flag", "retry"]


class StorableBody(BaseModel):
    """A request body whose values every database stores as sent (api/values.py): checked
    once, on the raw data of the whole body."""

    # Each field's description is the docstring under it (docs/api.md is generated from them).
    model_config = ConfigDict(use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        check_storable(data)  # an ApiError (400) passes through pydantic as it is
        return data


class VoiceRef(BaseModel):
    """A voice given as an object, as newer OpenAI SDKs send it."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    id: StrictStr
    """The voice's id."""


class SpeechFields(BaseModel):
    """Fields shared by sync speech and jobs."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    model: StrictStr | None = None
    """A model id of `GET /v1/models`; empty: the first model it lists that has the voice."""
    voice: StrictStr | VoiceRef | None = None
    """A voice of the model (`GET /v1/audio/voices`), built in or uploaded, as a string or
    `{"id": ...}`; empty: the model's first voice."""
    speed: Annotated[float, Field(ge=0.25, le=4.0)] = 1.0
    """Speaking rate, 0.25 to 4."""
    instructions: Annotated[StrictStr, Field(max_length=4096)] | None = None
    """How to speak (models that take instructions)."""
    language: Annotated[StrictStr, Field(max_length=32)] | None = None
    """The text's language (`en`, `de`, ...): the model's reading, and which aligner and
    recogniser apply."""
    seed: StrictInt | None = None
    """A sampling seed (models that take one)."""
    task_type: Annotated[StrictStr, Field(max_length=32)] | None = None
    """The model's task (Qwen3-TTS: `CustomVoice`, `VoiceDesign` or `Base`), which must be
    its checkpoint's."""
    max_new_tokens: Annotated[StrictInt, Field(ge=1, le=65536)] | None = None
    """The most codec frames one request may make (GPU models)."""
    lexicons: Annotated[list[Annotated[StrictStr, Field(min_length=1, max_length=128)]],
                        Field(max_length=lexicon.MAX_PER_REQUEST)] = Field(default_factory=list)
    """Pronunciation lexicons by id or name (`POST /v1/audio/lexicons`), the first winning."""

    @property
    def voice_id(self) -> str | None:
        """Return the voice id whichever way it was given."""
        return self.voice.id if isinstance(self.voice, VoiceRef) else self.voice

    def extras(self) -> dict[str, Any]:
        """Return the engine-specific optional fields that were set."""
        fields = ("instructions", "language", "seed", "task_type", "max_new_tokens")
        return {k: getattr(self, k) for k in fields if getattr(self, k) is not None}


class SpeechBody(SpeechFields, StorableBody):
    """`POST /v1/audio/speech`."""

    input: StrictStr
    """The text to speak, at most SYNC_MAX_CHARS (4,096) characters."""
    response_format: Format = "mp3"
    """The audio format; `pcm` is 16-bit little-endian mono at the rate in `X-Sample-Rate`."""
    stream_format: Literal["audio", "sse"] | None = None
    """Unset: one complete answer with `X-Audio-Duration`. `audio`: `pcm` (or `wav` with an
    open-ended header) streamed as it is made. `sse`: `speech.audio.delta` events with base64
    `pcm`, then `speech.audio.done` with usage."""


class Chapter(BaseModel):
    """One chapter of a job."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    title: Annotated[StrictStr, Field(max_length=500)] | None = None
    """The chapter's title (chapter marks, files, subtitles); empty: `Chapter N`."""
    input: StrictStr
    """The chapter's text."""
    voice: Annotated[StrictStr, Field(min_length=1, max_length=128)] | None = None
    """The chapter's voice, over the job's."""


class Book(BaseModel):
    """What a finished audiobook file says of itself (m4b and MP3 tags)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    title: Annotated[StrictStr, Field(min_length=1, max_length=500)] | None = None
    """The book's title; empty: the first chapter heading."""
    author: Annotated[StrictStr, Field(min_length=1, max_length=500)] | None = None
    """The author."""
    narrator: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None
    """The narrator; empty: the voice."""
    year: Annotated[StrictInt, Field(ge=1, le=9999)] | None = None
    """The year."""
    description: Annotated[StrictStr, Field(min_length=1, max_length=4000)] | None = None
    """A description (MP4 `desc`, an ID3 comment)."""


class JobBody(SpeechFields, StorableBody):
    """`POST /v1/audio/jobs`: `input` or `chapters`, plus delivery options."""

    response_format: JobFormat = "mp3"
    """The files' format; `m4b` is an MPEG-4 audiobook with chapter marks."""
    input: StrictStr | None = None
    """The text, one chapter or Markdown (`input_format`); or give `chapters`."""
    chapters: list[Chapter] | None = None
    """The book's chapters, in order; or give `input`."""
    priority: Literal["high", "normal", "low"] = "normal"
    """Which waiting work runs first on the engines: every `high` job's segments, then
    `normal`, then `low` (bulk back-catalogue); within a priority the keys share the engines
    by weight (equally by default) and a key's jobs take turns. The priorities a key may ask
    for: `NARRATOR_JOB_PRIORITIES`, or the key's own (`narrator keys set`)."""
    input_format: Literal["text", "markdown"] = "text"
    """`markdown`: level-1 and level-2 headings of `input` become chapters; markup and fenced
    code are not read."""
    output_url: Annotated[StrictStr, Field(max_length=1024)] | None = None
    """An `s3://bucket/prefix/` under OUTPUT_URL_PREFIXES: the files are written there."""
    webhook_url: Annotated[StrictStr, Field(max_length=2048)] | None = None
    """Called with the job, signed (WEBHOOK_SECRET), when it ends."""
    subtitles: list[Subtitle] = Field(default_factory=list)
    """`srt`, `vtt` (a cue per sentence) and `words` (JSON word times)."""
    verify: Verify = "off"
    """`flag`: each segment is heard back and the misheard ones flagged; `retry`: those are
    also spoken again, up to QUALITY_RETRIES times, the best take kept."""
    metadata: dict[str, Any] = Field(default_factory=dict)  # checked by check_metadata
    """Your own data, returned with the job as sent."""
    book: Book | None = None
    """What the files say of themselves (tags)."""
    chapter_voices: Annotated[dict[Annotated[StrictStr, Field(pattern=r"^\d{1,4}$")],
                                   Annotated[StrictStr, Field(min_length=1, max_length=128)]],
                              Field(max_length=1000)] = Field(default_factory=dict)
    """A voice per chapter by index (`"0"`, `"1"`, ...), however the chapters were given
    (JSON, Markdown or EPUB); over `chapters[].voice`."""
    cast: Annotated[dict[Annotated[StrictStr, Field(min_length=1, max_length=64,
                                                    pattern=r"^[\w][\w .'-]*$")],
                         Annotated[StrictStr, Field(min_length=1, max_length=128)]],
                    Field(max_length=50)] = Field(default_factory=dict)
    """Speaker names, as `[voice:name]` marks in the text give them, to voices of the model."""
    mastering: Literal["none", "acx"] = "none"
    """`acx`: each chapter file mastered and measured to ACX's requirements (MP3 only)."""
    cover: Annotated[StrictStr, Field(max_length=8 * 1024 * 1024)] | None = None
    """A JPEG or PNG cover, base64 (or a multipart `cover` file); m4b and MP3 carry it."""

    @field_validator("metadata")
    @classmethod
    def _small(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        return check_metadata(metadata)

    @model_validator(mode="after")
    def _consistent(self) -> "JobBody":
        language = (self.language or "en")[:2].lower()
        aligned = ALIGNER_LANGUAGES[get_settings().aligner]
        heard = RECOGNIZER_LANGUAGES[get_settings().recognizer]
        if "words" in self.subtitles and language not in aligned:
            raise ValueError("subtitles 'words' come from forced alignment, which covers "
                             f"{', '.join(aligned)} here; leave 'words' out for this language")
        if self.mastering == "acx" and self.response_format != "mp3":
            raise ValueError("mastering 'acx' delivers what ACX takes, 192 kbps constant-"
                             "bitrate MP3: set response_format to 'mp3'")
        if self.verify != "off" and language not in heard:
            raise ValueError("verify hears each segment back with a recogniser that covers "
                             f"{', '.join(heard)} here; leave verify out for this language")
        return self


class SegmentRange(BaseModel):
    """Segments `from` to `to`, both included (the manifest's indexes)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              use_attribute_docstrings=True)
    first: Annotated[StrictInt, Field(ge=0, alias="from")]
    """The first segment's index."""
    last: Annotated[StrictInt, Field(ge=0, alias="to")]
    """The last segment's index."""


class RerenderBody(StorableBody):
    """`POST /v1/audio/jobs/{id}/rerender`: which part to synthesise again, and how."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    chapters: Annotated[list[Annotated[StrictInt, Field(ge=0)]],
                        Field(max_length=1000)] = Field(default_factory=list)
    """Chapters to speak again, by index from 0."""
    segments: Annotated[list[SegmentRange], Field(max_length=1000)] = Field(
        default_factory=list)
    """Segment ranges to speak again (the manifest's indexes)."""
    inputs: Annotated[dict[Annotated[StrictStr, Field(pattern=r"^\d{1,4}$")], StrictStr],
                      Field(max_length=100)] = Field(default_factory=dict)
    """New text for chapters by index: each is planned again, its segments replaced."""
    voice: Annotated[StrictStr, Field(min_length=1, max_length=128)] | None = None
    """A new voice for what is spoken again."""
    seed: StrictInt | None = None
    """A new seed for what is spoken again (models that take one)."""
    lexicons: Annotated[list[Annotated[StrictStr, Field(min_length=1, max_length=128)]],
                        Field(max_length=lexicon.MAX_PER_REQUEST)] | None = None
    """Unset: as before; a list (empty too) replaces the lexicons for what is spoken again."""

    @model_validator(mode="after")
    def _something(self) -> "RerenderBody":
        if not self.chapters and not self.segments and not self.inputs:
            raise ValueError("give 'chapters' (indexes), 'segments' ([{from, to}]) or "
                             "'inputs' (new text by chapter index) to re-render")
        return self

    @field_validator("segments")
    @classmethod
    def _ordered(cls, ranges: list[SegmentRange]) -> list[SegmentRange]:
        if any(r.first > r.last for r in ranges):
            raise ValueError("a range's 'from' must not be after its 'to'")
        return ranges


class LexiconEntry(BaseModel):
    """One pronunciation: a word or phrase said as `alias`, or as the phonemes `ipa`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    text: Annotated[StrictStr, Field(min_length=1, max_length=lexicon.MAX_TEXT)]
    """The word or phrase, matched on word boundaries."""
    alias: Annotated[StrictStr, Field(min_length=1, max_length=lexicon.MAX_SAY)] | None = None
    """Say it as this respelling; or give `ipa`."""
    ipa: Annotated[StrictStr, Field(min_length=1, max_length=lexicon.MAX_SAY)] | None = None
    """Say it as these phonemes (IPA); or give `alias`."""
    match_case: StrictBool = False
    """Match only this capitalisation."""

    @model_validator(mode="after")
    def _one_pronunciation(self) -> "LexiconEntry":
        if not any(c.isalnum() for c in self.text):
            raise ValueError("text: has no word to match")
        if (self.alias is None) == (self.ipa is None):
            raise ValueError("give either 'alias' (a respelling) or 'ipa' (phonemes), not both")
        if self.alias is not None and not any(c.isalnum() for c in self.alias):
            raise ValueError("alias: has nothing to say")
        if self.ipa is not None and not self.ipa.strip():
            raise ValueError("ipa: has no phonemes")
        for name in ("text", "alias", "ipa"):
            value = getattr(self, name) or ""
            if "[" in value or "]" in value:
                raise ValueError(f"{name}: brackets are reserved for inline phonemes")
        return self


class LexiconBody(StorableBody):
    """`POST /v1/audio/lexicons` and `PUT /v1/audio/lexicons/{id}`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    name: Annotated[StrictStr, Field(min_length=1, max_length=128,
                                     pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._-]*$")]
    """The lexicon's name, unique per key; requests may name it instead of its id."""
    entries: Annotated[list[LexiconEntry], Field(min_length=1,
                                                 max_length=lexicon.MAX_ENTRIES)]
    """The pronunciations."""

    @field_validator("name")
    @classmethod
    def _not_an_id(cls, name: str) -> str:
        if name.startswith("lexicon_"):
            raise ValueError("must not start with 'lexicon_' (ids do)")
        return name

    @field_validator("entries")
    @classmethod
    def _distinct(cls, entries: list[LexiconEntry]) -> list[LexiconEntry]:
        seen: set[tuple[str, bool]] = set()
        for entry in entries:
            key = (lexicon.entry_key(entry.model_dump()), entry.match_case)
            if key in seen:
                raise ValueError(f"'{entry.text}' is listed twice")
            seen.add(key)
        return entries


class ExpiresAfter(BaseModel):
    """When a client secret expires."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    anchor: Literal["created_at"] = "created_at"
    """What `seconds` counts from: the secret's creation."""
    seconds: Annotated[StrictInt, Field(ge=10, le=7200)] = 600
    """Seconds until the secret expires, 10 to 7,200."""


class ClientSecretBody(BaseModel):
    """`POST /v1/audio/speech/stream/client_secrets`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    expires_after: ExpiresAfter = Field(default_factory=ExpiresAfter)
    """When the secret expires (default 600 s after its creation). A session opened with
    it lasts as sessions do; the secret is only checked when it opens."""
