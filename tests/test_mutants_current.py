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
