"""Spoken-form text for the engine: punctuation, numbers, money, dates, times, abbreviations.

Segments keep the text as written, because subtitles show it; the engine is given this
spoken form. Number words come from num2words in the text's language; the date, time,
money and abbreviation rules are English, and other languages get their numbers only.
Qwen3-TTS reads digits unevenly ("1984" as digits, "$5" as "dollar five"), and espeak
(Piper) reads years as cardinals, so both are given words.
"""

import re
import threading
from collections.abc import Callable
from functools import lru_cache

import num2words as _num2words

_PUNCTUATION = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
    "\u00ab": '"', "\u00bb": '"', "\u2026": "...", "\u00a0": " ", "\u202f": " ",
    "\u2009": " ", "\u2012": "-", "\u2010": "-", "\u2011": "-", "\u2212": "-",
})
# An em dash, or a spaced dash. A match starts only where a run of spaces starts: started
# inside one, it rescanned the run to its end at every space (quadratic on long runs).
_DASH = re.compile(r"(?<!\s)\s*[\u2014\u2015]\s*|(?<!\s)\s+[\u2013-]\s+")
_RANGE = re.compile(r"(?<=\d)\s*\u2013\s*(?=\d)")  # 1990–1995
_SPACES = re.compile(r"[ \t]+")

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
_MONTH = "|".join(MONTHS) + r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
_MONTH_INDEX = {m[:3].lower(): n for n, m in enumerate(MONTHS)}

# Abbreviations that are read the same wherever they stand; titles only before a name.
_ABBREVIATIONS = {
    "e.g.": "for example", "i.e.": "that is", "etc.": "et cetera", "vs.": "versus",
    "approx.": "approximately",
}
_TITLES = {"Dr.": "Doctor", "Mr.": "Mister", "Mrs.": "Missus", "Ms.": "Miz",
           "Prof.": "Professor", "St.": "Saint", "Sr.": "Senior", "Jr.": "Junior",
           "Gen.": "General", "Capt.": "Captain", "Lt.": "Lieutenant", "Rev.": "Reverend"}
_CURRENCIES = {"$": "USD", "\u20ac": "EUR", "\u00a3": "GBP"}

Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]
# num2words keeps one converter object per language, and some converters (tr, ar, da, sl,
# pt, and every float) write to it while they convert: one conversion at a time.
_NUM2WORDS = threading.Lock()


def num2words(number: int | float, **kwargs: str) -> str:
    """Return num2words' words for `number`, safe under threads."""
    with _NUM2WORDS:
        return str(_num2words.num2words(number, **kwargs))


@lru_cache
def _lang(language: str | None) -> str | None:
    """Return num2words' code for an ISO language, or None where it has none."""
    code = (language or "en").lower().replace("-", "_")
    for candidate in (code, code.split("_")[0]):
        try:
            num2words(1, lang=candidate)
            return candidate
        except NotImplementedError:
            continue
    return None


MAX_DIGITS = 15  # a longer number is read digit by digit (num2words overflows past ~10**30)


def _spelled(digits: str, lang: str) -> str:
    return " ".join(str(num2words(int(d), lang=lang)) for d in digits)


def _year(n: int) -> str:
    return str(num2words(n, lang="en", to="year"))


def _ordinal(n: int) -> str:
    return str(num2words(n, lang="en", to="ordinal"))


def _ordinal_of(digits: str) -> str:
    return _ordinal(int(digits)) if len(digits) <= MAX_DIGITS else _spelled(digits, "en")


def _cardinal(text: str, lang: str) -> str:
    digits = text.replace(",", "")
    if len(digits) > MAX_DIGITS:
        return _spelled(digits, lang)
    # num2words writes "one thousand, two hundred": the comma would be read as a pause
    return str(num2words(int(digits), lang=lang)).replace(",", "")


def _decimal(text: str, lang: str) -> str:
    whole, _, fraction = text.replace(",", "").partition(".")
    digits = _spelled(fraction, lang)
    point = str(num2words(0.5, lang=lang)).split()[1] if lang == "en" else "point"
    return f"{_cardinal(whole, lang)} {point} {digits}"


def _money(m: re.Match[str]) -> str:
    amount = m["amount"].replace(",", "")
    scale = f" {m['scale']}" if m["scale"] else ""
    if scale or "." not in amount or len(amount) > MAX_DIGITS:
        number = _decimal(amount, "en") if "." in amount else _cardinal(amount, "en")
        unit = {"USD": "dollars", "EUR": "euros", "GBP": "pounds"}[_CURRENCIES[m["symbol"]]]
        if number == "one" and not scale:
            unit = unit[:-1]
        return f"{number}{scale} {unit}"
    return str(num2words(float(amount), lang="en", to="currency",
                         currency=_CURRENCIES[m["symbol"]])).replace(",", " and", 1)


def _time(m: re.Match[str]) -> str:
    hour, minute = int(m["h"]), int(m["m"])
    if hour > 24 or minute > 59:
        return m[0]
    words = _cardinal(str(hour), "en")
    if minute == 0:
        words += "" if m["ampm"] else " o'clock"
    elif minute < 10:
        words += f" oh {_cardinal(str(minute), 'en')}"
    else:
        words += f" {_cardinal(str(minute), 'en')}"
    if m["ampm"]:
        words += " " + " ".join(m["ampm"].replace(".", "").lower())
    return words


def _month(name: str) -> str:
    return MONTHS[_MONTH_INDEX[name[:3].lower()]]


def _date_mdy(m: re.Match[str]) -> str:
    year = f", {_year(int(m['y']))}" if m["y"] else ""
    return f"{_month(m['mon'])} {_ordinal(int(m['d']))}{year}"


def _date_dmy(m: re.Match[str]) -> str:
    year = f", {_year(int(m['y']))}" if m["y"] else ""
    return f"the {_ordinal(int(m['d']))} of {_month(m['mon'])}{year}"


def _date_iso(m: re.Match[str]) -> str:
    month, day = int(m["mo"]), int(m["d"])
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m[0]
    return f"{MONTHS[month - 1]} {_ordinal(day)}, {_year(int(m['y']))}"


_ENGLISH: list[Rule] = [
    (re.compile(r"\b(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})\b"), _date_iso),
    (re.compile(rf"\b(?P<mon>{_MONTH})\.? (?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b"
                r"(?:,? (?P<y>\d{4})\b)?"), _date_mdy),
    (re.compile(rf"\b(?P<d>\d{{1,2}})(?:st|nd|rd|th)? (?:of )?(?P<mon>{_MONTH})\b\.?"
                r"(?:,? (?P<y>\d{4})\b)?"), _date_dmy),
    (re.compile(r"\b(1[1-9]\d\d|20\d\d)-(1[1-9]\d\d|20\d\d)\b"),  # 1990-1995
     lambda m: f"{_year(int(m[1]))} to {_year(int(m[2]))}"),
    (re.compile(r"(?<![\w.-])\d{2,}(?:-\d{2,})+(?!\w|\.\d)"),  # 555-1234: digit by digit
     lambda m: ", ".join(" ".join(_cardinal(d, "en") for d in group)
                         for group in m[0].split("-"))),
    (re.compile(r"\b(?P<h>\d{1,2}):(?P<m>\d{2})\b(?:\s?(?P<ampm>[ap]\.?m)(?![a-z]))?",
                re.IGNORECASE), _time),
    (re.compile(r"(?P<symbol>[$\u20ac\u00a3])\s?(?P<amount>\d[\d,]*(?:\.\d+)?)"
                r"(?:\s?(?P<scale>thousand|million|billion|trillion)\b)?"), _money),
    (re.compile(r"\b(\d+)(?:st|nd|rd|th)\b"), lambda m: _ordinal_of(m[1])),
    (re.compile(r"\b(1[1-9]\d\d|20\d\d)s\b"),  # the 1990s
     lambda m: _year(int(m[1]))[:-1] + "ies" if _year(int(m[1])).endswith("y")
     else _year(int(m[1])) + "s"),
    (re.compile(r"(?<![\d.,])(1[1-9]\d\d|20\d\d)(?!\d|[.,]\d)"), lambda m: _year(int(m[1]))),
    (re.compile(r"\bNo\. ?(?=\d)"), lambda m: "number "),
]


def _abbreviations(text: str) -> str:
    for short, long in _ABBREVIATIONS.items():
        text = text.replace(short, long)
    for short, long in _TITLES.items():
        text = re.sub(rf"(?<![\w.]){re.escape(short)} (?=[A-Z])", f"{long} ", text)
    return text


def _numbers(text: str, lang: str) -> str:
    text = re.sub(r"(?<!\d)(\d+(?:[.,]\d+)?)\s?%", lambda m: f"{m[1]} percent", text)
    text = re.sub(r"(?<![\d.])\d+(?:\.\d+){2,}(?![\d])",  # a version: 2.0.1
                  lambda m: " point ".join(_cardinal(d, lang) for d in m[0].split(".")), text)
    text = re.sub(r"(?<![\d.])(\d{1,3}(?:,\d{3})+|\d+)\.(\d+)(?![\d.])",
                  lambda m: _decimal(f"{m[1]}.{m[2]}", lang), text)
    text = re.sub(r"(?<![\d.])\d{1,3}(?:,\d{3})+(?![\d])", lambda m: _cardinal(m[0], lang), text)
    return re.sub(r"(?<![\d.])\d+(?![\d])", lambda m: _cardinal(m[0], lang), text)


def punctuation(text: str) -> str:
    """Unify quotes, dashes, ellipses and odd spaces; a spaced or em dash becomes a comma."""
    text = _RANGE.sub(" to ", text)
    text = text.translate(_PUNCTUATION)
    return _SPACES.sub(" ", _DASH.sub(", ", text)).strip()


def spoken(text: str, language: str | None = "en",
           lexicon: Callable[[str], str] | None = None) -> str:
    """Return the text as it should be read aloud (`lexicon`: core.lexicon's entries,
    applied to the written words before the numbers, dates and abbreviations are read)."""
    text = punctuation(text)
    if lexicon is not None:
        text = lexicon(text)
    lang = _lang(language)
    if lang is None:
        return text
    if lang.startswith("en"):
        text = _abbreviations(text)
        for pattern, replace in _ENGLISH:
            text = pattern.sub(replace, text)
    return _numbers(text, lang)
