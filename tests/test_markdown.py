"""Markdown input (core/markdown.py): indented lines are prose, fenced code is not read."""

from core.markdown import chapters

LICENCE = """# GNU GENERAL PUBLIC LICENSE

                       Version 3, 29 June 2007

 Copyright (C) 2007 Free Software Foundation, Inc.

    Everyone is permitted to copy and distribute verbatim copies
    of this license document.

```
not_read()
```

## Preamble

  The GNU General Public License is a free, copyleft license.
"""


def test_indented_lines_are_read_and_fenced_code_is_not() -> None:
    first, second = chapters(LICENCE)
    assert first["title"] == "GNU GENERAL PUBLIC LICENSE"
    assert "Version 3, 29 June 2007" in first["input"]
    assert "Everyone is permitted to copy and distribute verbatim copies of this license " \
           "document." in first["input"]
    assert "not_read" not in first["input"]
    assert second == {"title": "Preamble",
                      "input": "The GNU General Public License is a free, copyleft license."}
