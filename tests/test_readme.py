"""The README's Python snippets run, and print what the README shows after them (so the
README cannot go stale)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import dualtape

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def snippets(markdown: str) -> list[tuple[str, str | None]]:
    """``(code, shown_output)`` for each ```` ```python ```` block (not ```` ```python no-run
    ````), with the ```` ```text ```` block that follows it after nothing but blank lines, or
    None when none does."""
    blocks = list(FENCE.finditer(markdown))
    found = []
    for k, block in enumerate(blocks):
        if block.group(1).split() != ["python"]:
            continue
        after = blocks[k + 1] if k + 1 < len(blocks) else None
        adjacent = after is not None and not markdown[block.end():after.start()].strip()
        shown = after.group(2) if adjacent and after.group(1).strip() == "text" else None
        found.append((block.group(2), shown))
    return found


def test_the_readme_snippets_print_what_the_readme_shows():
    found = snippets(README.read_text())
    assert len(found) >= 2, "the README's ten lines and the recurrent snippet"
    namespace: dict = {}  # one namespace, in order: later snippets use earlier imports
    with dualtape.use_backend("numpy"):
        for number, (code, shown) in enumerate(found, 1):
            assert shown is not None, (
                f"python block {number} of README.md: show what it prints in a ```text block "
                "right after it (or fence it as ```python no-run)"
            )
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(code, f"README.md python block {number}", "exec"), namespace)
            assert printed.getvalue() == shown, (
                f"python block {number} of README.md printed {printed.getvalue()!r}; the text "
                f"block after it shows {shown!r}"
            )


def test_snippets_pairs_code_with_the_output_block_right_after_it():
    markdown = (
        "```python\nprint(1)\n```\n\n```text\n1\n```\n"
        "```python no-run\nnet = ...\n```\n"
        "```python\nx = 2\n```\nprose\n```text\nnot its output\n```\n"
        "```sh\nls\n```\n"
    )
    assert snippets(markdown) == [("print(1)\n", "1\n"), ("x = 2\n", None)]
