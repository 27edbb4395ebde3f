"""Text that arrives in pieces (an LLM's tokens), cut into what can be spoken now.

`SentenceBuffer.feed` takes text of any size and returns the sentences it completed: every
sentence pysbd finds but the last, and the last too once the text after its end mark is
only space and its final word is no abbreviation ("Mr. " waits for what follows). A sentence
that runs past `long` characters without ending gives up its clauses, cut after a comma,
semicolon, colon or dash, so that speech never waits on a sentence that will not end.
`flush` returns whatever is left. The work per call is bounded by the buffer, which holds
one unfinished sentence of at most `most` characters (past it the buffer is cut between
words), so a hostile stream cannot make it quadratic.
"""

import re
from typing import Any

from core.text import clauses, sentences

ENDED = re.compile(r"[.!?\u2026\u3002\uff01\uff1f][\"'\u201d\u2019)\]]*\s+$")
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "st", "sr", "jr", "prof", "vs", "etc",
                           "e.g", "i.e", "no", "fig", "mt", "ft", "approx", "dept", "inc"})


class SentenceBuffer:
    """The unspoken end of a stream of text (see the module's docstring)."""

    def __init__(self, language: str = "en", long: int = 200, most: int = 1000) -> None:
        self._text, self._language, self._long, self._most = "", language, long, most

    @property
    def pending(self) -> int:
        """Characters held, not yet spoken."""
        return len(self._text)

    def feed(self, text: str) -> list[str]:
        """Add `text`; return the sentences (or clauses) it completed, in order."""
        self._text += text
        found = sentences(self._text, self._language) if self._text.strip() else []
        if not found:
            return []
        done, at = [], 0
        for sentence in found[:-1]:
            at = self._text.index(sentence, at) + len(sentence)
            done.append(sentence)
        last = found[-1]
        if ENDED.search(self._text) and not self._abbreviated(last):
            done.append(last)
            self._text = ""
            return done
        self._text = self._text[at:]
        return done + self._cut_long()

    def flush(self) -> list[str]:
        """Return what is left, as sentences, and empty the buffer."""
        left = sentences(self._text, self._language) if self._text.strip() else []
        self._text = ""
        return left

    def _abbreviated(self, sentence: str) -> bool:
        words = sentence.rstrip(".\"')]\u201d\u2019 ").rsplit(maxsplit=1)
        return bool(words) and words[-1].lower().rstrip(".") in ABBREVIATIONS \
            and sentence.rstrip().endswith(".")

    def _cut_long(self) -> list[str]:
        """Clauses of an unfinished sentence past `long` characters (all but the last), or
        its words past `most`."""
        text = self._text.strip()
        if len(text) <= self._long:
            return []
        pieces = clauses(text, self._long)
        at = self._text.rfind(pieces[-1]) if len(pieces) > 1 else -1
        if at >= 0:  # the last clause waits for what follows it
            self._text = self._text[at:]
            return pieces[:-1]
        if len(text) > self._most:
            cut = text.rfind(" ", 0, self._most)
            cut = cut if cut > 0 else self._most
            self._text = text[cut:].lstrip()
            return [text[:cut].strip()]
        return []


def estimated_words(sentence: str, start: float, seconds: float) -> list[dict[str, Any]]:
    """Word times of a spoken sentence shared out by letter count over its audio (`start`
    and `seconds` in the stream): an estimate, not where the engine put each word."""
    words = sentence.split()
    weights = [max(1, sum(c.isalnum() for c in word)) for word in words]
    total, at, out = sum(weights), start, []
    for word, weight in zip(words, weights, strict=True):
        span = seconds * weight / total
        out.append({"word": word, "start": round(at, 3), "end": round(at + span, 3)})
        at += span
    return out
