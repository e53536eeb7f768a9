"""Every planted bug of ``tests/mutation/`` still applies to the code: its snippet occurs
exactly once in its file (``run_mutants.py --stale``). A change that moves or rewrites a line
a mutant plants its bug in must re-aim that mutant, or the mutation score silently counts one
bug fewer; eight had drifted by 2026-12-03."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_mutant_finds_its_snippet_exactly_once():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("the stale check lists the tracked files with git: not a git checkout")
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "mutation" / "run_mutants.py"),
                           "--stale"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"stale mutants (re-aim them):\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="module")
def mutation_tools():
    """``run_mutants`` and ``generated``, imported from ``tests/mutation`` (a script folder)."""
    sys.path.insert(0, str(ROOT / "tests" / "mutation"))
    try:
        import generated
        import run_mutants
    finally:
        sys.path.remove(str(ROOT / "tests" / "mutation"))
    return run_mutants, generated


SOURCE = "def f(a, b):\n    return a + b\n\n\ndef g(a, b):\n    return a+b\n"


@pytest.mark.parametrize("snippet, where", [
    ("    return a + b\n", (13, 30)),            # as written, once
    ("return a  +  b\n  ", None),                # respaced: twice, so ambiguous
    ("def g(a,\n      b):", (32, 44)),            # a line split by a formatter
    ("return a * b", None),                      # gone
])
def test_a_snippet_is_found_as_written_or_respaced_exactly_once(mutation_tools, snippet, where):
    run_mutants, _ = mutation_tools
    assert run_mutants.locate(SOURCE, snippet) == where


RESULTS = """\
    dualtape.files.x_same_file__mutmut_1: killed
    dualtape.files.x_same_file__mutmut_2: survived
    dualtape.files.xǁBoundedǁread__mutmut_1: timeout
    dualtape.text.lock.x_lock_checkpoint__mutmut_3: no tests
    dualtape.text.lock.x_lock_checkpoint__mutmut_4: killed
"""


def test_generated_scores_count_each_modules_verdicts(mutation_tools):
    _, generated = mutation_tools
    counts = generated.scores(RESULTS)
    assert counts == {"dualtape/files.py": {"killed": 1, "survived": 1, "timeout": 1},
                      "dualtape/text/lock.py": {"no tests": 1, "killed": 1}}
    assert generated.summary(counts) == [
        "dualtape/files.py: killed 2 of 3 (66.7%)",
        "dualtape/text/lock.py: killed 1 of 1 (100.0%); no tests 1",
        "all: killed 3 of 4 (75.0%); no tests 1"]


def test_generated_section_replaces_the_projects_own(mutation_tools):
    _, generated = mutation_tools
    section = generated.mutmut_section(["dualtape/files.py"], ["tests/test_io.py"])
    once = generated.with_section("[project]\nname = 'x'\n", section)
    assert once.endswith(section) and once.startswith("[project]\n")
    again = generated.with_section(once + "\n[tool.other]\nkey = 1\n", section)
    assert again.count("[tool.mutmut]") == 1 and again.endswith("[tool.other]\nkey = 1\n")
