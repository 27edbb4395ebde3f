"""Every `code` an error can carry, with what it means and what to do: the API reference's
table of error codes (narrator/api_reference.py) is written from these.

tests/test_api_reference.py reads the source for the codes the API raises and the codes a
failed job records, and fails when one of them is missing here, or when one here is used
nowhere.
"""

# An error answer's `error.code`: the HTTP status it comes with, and its meaning.
ANSWERS: dict[str, tuple[int, str]] = {
    "invalid_value": (400, "A field has a wrong type or value, or a header is malformed; "
                      "`param` names it."),
    "invalid_json": (400, "A batch body is not valid JSON or JSON Lines."),
    "empty_input": (400, "The text (or a chapter, or a batch) has nothing to speak."),
    "input_too_long": (400, "The text is over `NARRATOR_SYNC_MAX_CHARS` (sync) or "
                       "`NARRATOR_JOB_MAX_CHARS` (a job, all chapters together)."),
    "too_many_chapters": (400, "A job has more chapters than the limit."),
    "too_many_jobs": (400, "A batch has more jobs than the limit."),
    "too_much_silence": (400, "The text's `[pause:Ns]` marks ask for more silence than a "
                         "job may have."),
    "model_not_found": (400, "No model of that id is served here (`GET /v1/models`)."),
    "voice_not_found": (400, "The model has no voice of that name, and the key has "
                        "uploaded none (`GET /v1/audio/voices`)."),
    "unknown_speaker": (400, "A `[voice:name]` mark names a speaker the job's cast does not "
                        "map to a voice."),
    "unsupported_language": (400, "The voice does not speak the language asked for."),
    "unsupported_parameter": (400, "The model or this server does not support that field "
                              "(for example `instructions` on Piper)."),
    "lexicon_not_found": (400, "A job names a lexicon this key does not have."),
    "invalid_epub": (400, "An uploaded EPUB cannot be read."),
    "invalid_image": (400, "A cover is not a JPEG or PNG image that decodes."),
    "invalid_audio": (400, "An uploaded voice clip is not audio that decodes, or is too "
                      "short or too long."),
    "consent_required": (400, "A voice clone was uploaded without naming the speaker's "
                         "consent (`consent`: an id from `POST /v1/audio/voice_consents`)."),
    "consent_not_found": (400, "The consent a voice names is not one of this key's."),
    "consent_not_heard": (400, "A consent recording does not say the consent statement "
                          "(the message says what was heard, and what to read)."),
    "voice_disabled": (400, "The uploaded voice's consent was deleted (or it was uploaded "
                       "before consents existed): upload it again with a consent."),
    "output_url_not_allowed": (400, "`output_url` is not under a prefix the server allows "
                               "(`NARRATOR_OUTPUT_URL_PREFIXES`)."),
    "webhook_url_refused": (400, "`webhook_url` points at a private, loopback or otherwise "
                            "refused address."),
    "missing_api_key": (401, "The server has API keys and the request sent none."),
    "invalid_api_key": (401, "The key sent is not one of the server's."),
    "priority_not_allowed": (403, "The job asks for a priority this server does not allow "
                             "its key (`NARRATOR_JOB_PRIORITIES`, or the key's own)."),
    "cross_site_request": (403, "A browser form from another site posted to the API."),
    "not_found": (404, "Nothing of that id exists for this key."),
    "job_not_completed": (409, "The job's audio is asked for before it completed."),
    "session_idle": (400, "A `WS /v1/audio/speech/stream` session sent no message for "
                     "`NARRATOR_LIVE_IDLE_SECONDS`; it is closed (1008)."),
    "session_too_long": (400, "A streaming session passed `NARRATOR_LIVE_SESSION_SECONDS`; "
                         "open another (closed with 1008)."),
    "stream_unavailable": (409, "The job has no stream to listen to while it is made: it is "
                           "not an MP3 or m4b book, it is ACX-mastered, or its parts were not "
                           "kept."),
    "job_finished": (409, "A job that already completed or failed cannot be cancelled."),
    "job_not_failed": (409, "Only a failed job can be retried."),
    "job_not_retryable": (409, "The job failed before it was planned; a retry would fail the "
                          "same way: submit it again."),
    "parts_not_kept": (409, "The job's segment audio was not kept, so it cannot be "
                       "re-rendered: submit it again."),
    "lexicon_exists": (409, "A lexicon of that name exists; replace it with PUT."),
    "idempotency_key_reused": (409, "The `Idempotency-Key` was used before with a different "
                               "request."),
    "body_too_large": (413, "The body is over `NARRATOR_MAX_BODY_BYTES`."),
    "file_too_large": (413, "An uploaded file is over its limit."),
    "unsupported_media_type": (415, "The body's `Content-Type` is not one the endpoint "
                               "reads."),
    "request_timeout": (408, "The client sent its body too slowly."),
    "rate_limit_exceeded": (429, "The key's requests per minute are used up; wait "
                            "`Retry-After` seconds."),
    "too_many_active_jobs": (429, "The key has as many jobs queued or in progress as it may."),
    "daily_quota_exceeded": (429, "The key's characters for today are used up."),
    "engine_error": (500, "The speech engine failed on this request (sync or streamed)."),
    "dependency_unavailable": (503, "The database, broker or storage does not answer; retry "
                               "after `Retry-After`."),
    "worker_lost": (503, "No worker answered a sync request in time (none running, or it "
                    "died); retry after `Retry-After`."),
}

# A failed job's `error.code` (GET /v1/audio/jobs/{id}), and its meaning.
JOB_FAILURES: dict[str, str] = {
    "empty_input": "After parsing (Markdown, EPUB), the text had nothing to speak.",
    "plan_incomplete": "The job could not be split into segments; its message says why.",
    "segment_failed": "A segment failed on every attempt, or its worker vanished too often; "
                      "`POST .../retry` runs the failed segments again.",
    "assembly_failed": "Joining the segments into the result failed on every attempt; a retry "
                       "assembles again.",
    "part_lost": "A finished segment's audio went missing from storage at assembly more "
                 "often than its attempts allow (each time it is made again first).",
    "incomplete_result": "The segments do not hold the whole text, so the job cannot be "
                         "assembled whole; its message names what is missing.",
}
