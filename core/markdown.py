"""Markdown input: headings become chapters, markup becomes plain speakable text."""

from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

CHAPTER_LEVELS = ("h1", "h2")
PARSER = MarkdownIt("commonmark").disable("code")  # indented lines are prose (chapters())
BLOCK_ENDS = ("paragraph_close", "list_item_close", "blockquote_close", "heading_close")


def _inline_text(token: Token) -> str:
    parts: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type == "softbreak":
            parts.append(" ")
        elif child.type == "hardbreak":
            parts.append("\n")
        elif child.type == "image":
            parts.append(_inline_text(child))
    return "".join(parts)


def chapters(text: str) -> list[dict[str, Any]]:
    """Split Markdown into chapters at level-1 and level-2 headings, as plain text.

    Text before the first heading is a chapter without a title; fenced code blocks are not
    read. Text indented by four spaces or more is read as prose, not as CommonMark's
    indented code: plain text saved as Markdown indents lines such as a licence's
    "Version 3, 29 June 2007", and a book has no code to skip that is not fenced.
    """
    tokens = PARSER.parse(text)
    result: list[dict[str, Any]] = []
    title: str | None = None
    body: list[str] = []
    pending_heading: str | None = None

    def close() -> None:
        spoken = "".join(body).strip()
        if spoken:
            result.append({"title": title, "input": spoken})

    for token in tokens:
        if token.type == "heading_open":
            pending_heading = token.tag
        elif token.type == "inline":
            content = _inline_text(token).strip()
            if pending_heading in CHAPTER_LEVELS:
                close()
                title, body = content or None, []
            elif content:
                body.append(content)
        elif token.type in BLOCK_ENDS:
            if token.type == "heading_close":
                if pending_heading not in CHAPTER_LEVELS:
                    body.append("\n\n")  # a lower heading reads as its own paragraph
                pending_heading = None
            else:
                body.append("\n\n")
    close()
    return result
