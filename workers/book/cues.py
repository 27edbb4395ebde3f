"""How a sentence is cut into subtitle cues a viewer can read.

A cue holds at most two lines of 42 characters (CUE_MAX_CHARS), and is shown on two lines
when it is longer than one (`lines`). A longer sentence is cut
after its commas, semicolons, colons and dashes (core.text.clauses); a clause still too long
is cut between words, as evenly as it allows, but never inside a name ("Free Software
Foundation"), a number or a date ("29 June 2007"), or before an abbreviation that ends a
name ("Foundation, Inc."): a cut there is taken only when nothing else is left.
"""

import re

from core.text import clauses

LINE_MAX_CHARS = 42
CUE_MAX_CHARS = 2 * LINE_MAX_CHARS
# Abbreviations that close the name before them: a cue never starts with one.
CLOSING = re.compile(r"^(Inc|Ltd|Co|Corp|LLC|LLP|Jr|Sr|GmbH|AG|plc|S\.A|N\.V|B\.V)\.?[,;:]?$")


def pieces(sentence: str, limit: int = CUE_MAX_CHARS) -> list[str]:
    """The cues of one sentence, in order; together they are the sentence's words."""
    out: list[str] = []
    for clause in clauses(sentence, limit):
        if out and CLOSING.match(clause.split(" ", 1)[0]):
            out[-1] += " " + clause  # "Foundation," + "Inc.": cut elsewhere, below
        else:
            out.append(clause)
    return [piece for clause in out for piece in _fit(clause, limit)]


def _fit(text: str, limit: int) -> list[str]:
    """Cut `text` between words until every piece fits two lines of half the limit, at the
    best place each time."""
    if len(text) <= limit and all(len(line) <= limit // 2 for line in lines(text, limit // 2)):
        return [text]
    words = text.split(" ")
    if len(words) == 1:
        return [text]  # one word longer than a cue: it stays whole
    cut = min(range(1, len(words)), key=lambda n: _cost(words, n))
    return _fit(" ".join(words[:cut]), limit) + _fit(" ".join(words[cut:]), limit)


def lines(cue: str, width: int = LINE_MAX_CHARS) -> list[str]:
    """A cue's text as it is shown: one line, or two broken between words where both fit
    and, of those, not inside a name or number and as even as they can be."""
    words = cue.split(" ")
    if len(cue) <= width or len(words) == 1:
        return [cue]
    n = min(range(1, len(words)), key=lambda n: (_cost(words, n)[1] > width, *_cost(words, n)))
    return [" ".join(words[:n]), " ".join(words[n:])]


def _cost(words: list[str], n: int) -> tuple[bool, int]:
    """How bad a cut before words[n] is: inside a name, number or date first, then how
    uneven the two sides are."""
    left, right = words[n - 1], words[n]
    bound = (CLOSING.match(right) is not None
             or (_capital(left) and _capital(right) and not left.endswith((".", ",", ";", ":")))
             or (_digit(left) and (_digit(right) or _capital(right)))
             or (_digit(right) and _capital(left) and not left.endswith((".", ",", ";", ":"))))
    before = sum(len(w) for w in words[:n]) + n - 1
    after = sum(len(w) for w in words[n:]) + len(words) - n - 1
    return bound, max(before, after)


def _capital(word: str) -> bool:
    return word[:1].isupper()


def _digit(word: str) -> bool:
    return any(c.isdigit() for c in word)
