"""The Python snippets of the README and of ``docs/*.md`` run, and print what the page shows
after them (so no page can go stale); every relative link between them leads somewhere."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

import dualtape

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)


def snippets(markdown: str, info: str = "python") -> list[tuple[str, str | None]]:
    """``(code, shown_output)`` for each ```` ```python ```` block (not ```` ```python no-run
    ```` nor ```` ```python torch ````: ``info`` names the kind), with the ```` ```text ````
    block that follows it after nothing but blank lines, or None when none does."""
    blocks = list(FENCE.finditer(markdown))
    found = []
    for k, block in enumerate(blocks):
        if block.group(1).split() != info.split():
            continue
        after = blocks[k + 1] if k + 1 < len(blocks) else None
        adjacent = after is not None and not markdown[block.end():after.start()].strip()
        shown = after.group(2) if adjacent and after.group(1).strip() == "text" else None
        found.append((block.group(2), shown))
    return found


def page_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_the_snippets_print_what_the_page_shows(page):
    found = snippets(page.read_text())
    if page == README:
        assert len(found) >= 2, "the README's ten lines and the loop of your own"
    name = page_id(page)
    namespace: dict = {}  # one namespace per page, in order: later snippets use earlier ones
    with dualtape.use_backend("numpy"):
        for number, (code, shown) in enumerate(found, 1):
            assert shown is not None, (
                f"python block {number} of {name}: show what it prints in a ```text block "
                "right after it (or fence it as ```python no-run)"
            )
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(code, f"{name} python block {number}", "exec"), namespace)
            assert printed.getvalue() == shown, (
                f"python block {number} of {name} printed {printed.getvalue()!r}; the text "
                f"block after it shows {shown!r}"
            )


def test_the_readme_is_a_first_page():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail to docs/"
    first_python = next(n for n, line in enumerate(lines, 1) if line.strip() == "```python")
    assert first_python < 80, f"the README's first example starts at line {first_python}"
    assert "## Two commands" in text
    for command in (
        'pip install -e ".[bench]" && dualtape info && dualtape train-text --time-limit 30 '
        "&& dualtape bench --quick",
        'pip install -e ".[test]" && pytest',
    ):
        assert f"\n{command}\n" in text, command


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation removed (letters,
    digits, '-' and '_' stay), each space a '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    return "".join(c for c in text if c.isalnum() or c in "-_ ").replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a page's headings (outside code blocks); a repeated one gets GitHub's
    ``-1``, ``-2``... suffixes."""
    prose = FENCE.sub("", markdown)
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(prose):
        base = anchor(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def broken_links(page: Path) -> list[str]:
    """The relative links of a markdown page (outside code blocks) whose file, or whose anchor
    in a markdown file, does not exist."""
    markdown = page.read_text()
    broken = []
    for target in LINK.findall(FENCE.sub("", markdown)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / unquote(path)).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked.read_text()):
            broken.append(f"{target}: no heading #{fragment} in {linked.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_leads_to_a_file_and_heading(page):
    assert broken_links(page) == []


def test_broken_links_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# The other page\n\n## Tapes, and `versions`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#tapes-and-versions) [ok](#here) [web](https://example.com/x.md)\n"
        "# Here\n[gone](missing.md) [no heading](other.md#tapes) ![img](nope.png)\n"
        "```sh\n[not a link](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        f"missing.md: no file {tmp_path / 'missing.md'}",
        "other.md#tapes: no heading #tapes in other.md",
        f"nope.png: no file {tmp_path / 'nope.png'}",
    ]


def test_anchor_follows_githubs_rule():
    assert anchor("Grenade's LSTM and its tape") == "grenades-lstm-and-its-tape"
    assert anchor("`dualtape bench`") == "dualtape-bench"
    assert anchor("Images: Convolution, Pooling") == "images-convolution-pooling"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_snippets_pairs_code_with_the_output_block_right_after_it():
    markdown = (
        "```python\nprint(1)\n```\n\n```text\n1\n```\n"
        "```python no-run\nnet = ...\n```\n"
        "```python\nx = 2\n```\nprose\n```text\nnot its output\n```\n"
        "```sh\nls\n```\n"
    )
    assert snippets(markdown) == [("print(1)\n", "1\n"), ("x = 2\n", None)]
    assert snippets(markdown, "python no-run") == [("net = ...\n", None)]
