"""Pronunciation lexicons: whole words and phrases respelled, or given as IPA, before speech.

An entry is `{"text", "alias"}` (said as the alias) or `{"text", "ipa"}` (Piper speaks the
phonemes, passed inline as `[[ ... ]]`). It matches whole words only: not inside a longer
word, so "Ann" leaves "Annex" alone, though it still matches "Ann's". Matching ignores case
unless the entry says `match_case`; the words of a phrase match across any whitespace; the
longest entry wins where several start at one place, and a replacement is never matched
again. An alias takes the capital of the word it replaces ("Mr. Nguyen" stays a title
before a name). Lexicons apply to the spoken form only: segments and subtitles keep the text as
written. Where a request names several, an earlier lexicon's entry wins over a later one's.
"""

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from core.normalize import punctuation, spoken

MAX_ENTRIES = 2000  # per lexicon
MAX_PER_REQUEST = 5  # lexicons a job or a sync request may name
MAX_TEXT = 100
MAX_SAY = 200
Entries = Sequence[Mapping[str, Any]]
Reader = Callable[[str], str]


def entry_key(entry: Mapping[str, Any]) -> str:
    """Return what an entry matches, as compared: its words, lower-cased unless match_case."""
    words = " ".join(punctuation(entry["text"]).split())
    return words if entry.get("match_case") else words.casefold()


def replacement(entry: Mapping[str, Any]) -> str:
    """Return what an entry is said as: its alias, or its IPA as Piper's inline phonemes."""
    return f"[[ {entry['ipa']} ]]" if entry.get("ipa") else str(entry["alias"])


def merged(lexicons: Iterable[Entries]) -> list[dict[str, Any]]:
    """Return one entry list of several lexicons, the earlier lexicon's entry winning."""
    out: dict[tuple[str, bool], dict[str, Any]] = {}
    for entries in lexicons:
        for entry in entries:
            out.setdefault((entry_key(entry), bool(entry.get("match_case"))), dict(entry))
    return list(out.values())


class _Compiled:
    """One regex of every entry, and the replacements by matched key."""

    def __init__(self, entries: Entries) -> None:
        self.exact = {entry_key(e): replacement(e) for e in entries if e.get("match_case")}
        self.folded = {entry_key(e): replacement(e) for e in entries if not e.get("match_case")}
        alternatives = sorted(((punctuation(e["text"]), bool(e.get("match_case")))
                               for e in entries), key=lambda a: -len(a[0]))
        body = "|".join(_pattern(text, exact) for text, exact in alternatives)
        self.regex = re.compile(rf"(?<!\w)(?:{body})(?!\w)") if body else None

    def apply(self, text: str) -> str:
        if self.regex is None:
            return text
        return self.regex.sub(self._replace, text)

    def _replace(self, match: re.Match[str]) -> str:
        words = " ".join(match[0].split())
        found = self.exact.get(words)
        if found is None:
            found = self.folded.get(words.casefold())
        if found is None:
            return match[0]
        if match[0][:1].isupper() and found[:1].islower():  # a sentence's or a name's capital
            return found[:1].upper() + found[1:]
        return found


def _pattern(text: str, exact: bool) -> str:
    body = r"\s+".join(re.escape(word) for word in text.split())
    return body if exact else f"(?i:{body})"


@lru_cache(maxsize=256)
def _compiled(frozen: tuple[tuple[str, str, str, bool], ...]) -> _Compiled:
    return _Compiled([{"text": t, "alias": a, "ipa": i, "match_case": c}
                      for t, a, i, c in frozen])


def applier(entries: Entries) -> Reader:
    """Return a function that applies `entries` to a text (compiled once and shared: re
    patterns are safe to use from many threads, and lru_cache is thread-safe)."""
    return _compiled(tuple((str(e["text"]), str(e.get("alias") or ""), str(e.get("ipa") or ""),
                            bool(e.get("match_case"))) for e in entries)).apply


def reader(language: str | None, normalize: bool, entries: Entries | None = None) -> Reader:
    """Return the function that turns written text into what the engine is given: the
    lexicon's entries applied, then (`normalize`) numbers, dates and the rest read out."""
    lexicon = applier(entries) if entries else None
    if normalize:
        return lambda text: spoken(text, language, lexicon)
    return lexicon or (lambda text: text)


def reader_for(options: Mapping[str, Any], normalize: bool) -> Reader:
    """Return the reader of a job's options or a sync request's payload (their `language`
    and `lexicon`, the merged entries the API copied in)."""
    return reader(options.get("language"), normalize, options.get("lexicon"))


def ipa_entries(entries: Entries) -> list[str]:
    """Return the texts of the entries given as IPA."""
    return [str(e["text"]) for e in entries if e.get("ipa")]
