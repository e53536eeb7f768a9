"""Plant hand-written bugs one at a time and count how many the tests catch (mutation testing).

Only code a generator cannot reach keeps hand-written mutants: numba's compiled kernels and the
CUDA source (``compiled.py`` beside this file; ``generated.py`` plants mutmut's everywhere else).
An area module lists ``MUTANTS``: a replacement of one snippet of one source file, the bug it
stands for, and the test files that should catch it. For each mutant this copies the tracked
tree once into a temporary folder, writes the mutated file there, runs ``python -m pytest -x``
on its test files with that copy first on ``PYTHONPATH`` (subprocesses the tests start import it
too), and restores the file. A snippet is found as written or else whatever the whitespace
between its characters (``locate``), so reformatting a line keeps its mutant; one that occurs
neither way exactly once is reported as stale, not counted. Not part of the test suite (a few
minutes); run it after changing a kernel or its tests:

    python tests/mutation/run_mutants.py            # every area
    python tests/mutation/run_mutants.py compiled   # some areas
    python tests/mutation/run_mutants.py --stale    # only where moved snippets are now
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Mutant:
    """``old`` (exactly once in ``path``) becomes ``new``: the bug ``why``, which one of
    ``tests`` should catch."""

    path: str
    old: str
    new: str
    why: str
    tests: tuple[str, ...]


def areas() -> list[str]:
    """The area modules beside this file."""
    return sorted(p.stem for p in HERE.glob("*.py") if p.stem not in ("run_mutants", "generated"))


def load(area: str) -> list[Mutant]:
    """The ``MUTANTS`` of one area module."""
    spec = importlib.util.spec_from_file_location(f"mutants_{area}", HERE / f"{area}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.MUTANTS


def locate(text: str, snippet: str) -> tuple[int, int] | None:
    """Where ``snippet`` occurs exactly once in ``text``: as written, or else with any run of
    whitespace (none included) between its non-blank characters, so that a reformatted line
    (split, re-indented, respaced) keeps its mutant; None when neither is exactly once."""
    if text.count(snippet) == 1:
        start = text.index(snippet)
        return start, start + len(snippet)
    pattern = r"\s*".join(re.escape(c) for c in snippet if not c.isspace())
    found = list(re.finditer(pattern, text))
    return found[0].span() if len(found) == 1 else None


def copy_tree(into: Path) -> None:
    """The tracked and untracked-but-not-ignored files of the checkout, copied into ``into``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
        check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)


def run(mutant: Mutant, tree: Path, timeout: float) -> str:
    """``killed``, ``survived``, ``stale`` or ``timeout`` for one mutant planted in ``tree``."""
    target = tree / mutant.path
    original = target.read_text()
    span = locate(original, mutant.old)
    if span is None:
        return "stale"
    start, end = span
    target.write_text(original[:start] + mutant.new + original[end:])
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    tests = subprocess.Popen(  # in a session of its own: whatever it starts goes with it
        [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider",
         *mutant.tests],
        cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        return "survived" if tests.wait(timeout=timeout) == 0 else "killed"
    except subprocess.TimeoutExpired:
        return "timeout"
    finally:
        with contextlib.suppress(ProcessLookupError):  # a mutant's processes left running
            os.killpg(tests.pid, signal.SIGKILL)
        tests.wait()
        target.write_text(original)


def stale(chosen: list[str]) -> int:
    """Report each mutant of ``chosen`` whose snippet is not exactly once in its path, with the
    tracked files that hold it now (a move between files only changes the path); 1 if any."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z",
                             "dualtape", "bench", "examples"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    sources = {name: (ROOT / name).read_text() for name in filter(None, listed)
               if Path(name).suffix in (".py", ".cu", ".cuh", ".sh")}
    found = 0
    for area in chosen:
        for mutant in load(area):
            if locate(sources.get(mutant.path, ""), mutant.old) is None:
                found += 1
                now = [name for name, text in sources.items()
                       if locate(text, mutant.old) is not None]
                print(f"{area}: {mutant.why}\n    {mutant.path} -> {', '.join(now) or 'nowhere'}")
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    """Run the mutants of the chosen areas; exit 1 when any survived or went stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("areas", nargs="*", help=f"default: all of {', '.join(areas())}")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant")
    parser.add_argument("--stale", action="store_true",
                        help="run nothing: list the mutants whose snippet moved, and where to")
    args = parser.parse_args(argv)
    chosen = args.areas or areas()
    if args.stale:
        return stale(chosen)
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="dualtape-mutants-") as folder:
        tree = Path(folder)
        copy_tree(tree)
        for area in chosen:
            for mutant in load(area):
                began = time.perf_counter()
                outcome = run(mutant, tree, args.timeout)
                counts[outcome] = counts.get(outcome, 0) + 1
                seconds = time.perf_counter() - began
                print(f"{outcome:>8}  {area:<10} {mutant.why}  ({seconds:.0f} s)", flush=True)
    total = counts.get("killed", 0) + counts.get("survived", 0) + counts.get("timeout", 0)
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    print(f"killed {killed} of {total} ({100 * killed / max(total, 1):.0f}%); "
          f"stale {counts.get('stale', 0)}")
    return 0 if killed == total and not counts.get("stale") else 1


if __name__ == "__main__":
    sys.exit(main())
