"""Response formats: content types and file extensions (no codec imports, the API uses it)."""

CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "m4b": "audio/mp4",  # jobs only: an audiobook with chapter marks
}
EXTENSIONS = {"mp3": "mp3", "opus": "ogg", "aac": "aac", "flac": "flac", "wav": "wav",
              "pcm": "pcm", "m4b": "m4b"}
