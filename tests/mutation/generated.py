"""Generated planted bugs: mutmut's mutants of chosen modules, against chosen tests.

mutmut (3.8 or later, in the test extra) rewrites every function of the chosen modules into
its one-token variants (an operator, a constant, a comparison, a removed argument...) and runs,
for each variant, the tests that cover that function. This copies the checkout (tracked and
untracked-but-not-ignored files) into a temporary folder, writes a ``[tool.mutmut]`` section
naming the modules and the tests there, runs ``mutmut run`` and prints each module's score:
killed (a test failed, or it ran past mutmut's time-out) out of killed plus survived.
mutmut does not mutate decorated functions, so numba's ``@njit`` kernels and the CUDA source
keep their hand-written mutants (``run_mutants.py``). Not part of the test suite (minutes per
module on two cores):

    python tests/mutation/generated.py dualtape/text/lock.py --tests tests/test_text_safety.py \
        -k lock                      # pytest's -k narrows the tests
    python tests/mutation/generated.py dualtape/zip_reader.py --tests tests/test_io_safety.py \
        tests/test_io.py --show      # print each survivor's diff too
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from run_mutants import copy_tree

SECTION = re.compile(r"^\[tool\.mutmut\]\n(?:(?!\[).*\n?)*", re.MULTILINE)
"""An existing ``[tool.mutmut]`` section, up to the next table."""
LINE = re.compile(r"^\s*(?P<name>[\w.ǁ]+)__mutmut_\d+: (?P<status>[\w ]+?)\s*$")
"""One line of ``mutmut results --all true``: the mutated function's name and the verdict."""
KILLED = ("killed", "timeout")
THREAD_COUNTS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                 "NUMBA_NUM_THREADS")
"""The thread pools set to one thread for mutmut's run (see ``main``)."""
COUNTED = (*KILLED, "survived")


def mutmut_section(modules: list[str], tests: list[str]) -> str:
    """The ``[tool.mutmut]`` table mutating ``modules`` and selecting tests from ``tests``."""
    return ("[tool.mutmut]\n"
            'source_paths = ["dualtape"]\n'
            f"only_mutate = {json.dumps(modules)}\n"
            # one process per mutant run: mutmut forks its own workers, xdist would nest
            'pytest_add_cli_args = ["-n", "0", "-p", "no:cacheprovider"]\n'
            f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n")


def with_section(pyproject: str, section: str) -> str:
    """``pyproject`` with its ``[tool.mutmut]`` table replaced by (or appended as) ``section``."""
    if SECTION.search(pyproject):
        return SECTION.sub(lambda _: section, pyproject, count=1)
    return pyproject.rstrip("\n") + "\n\n" + section


def module_of(function: str) -> str:
    """The module path of a mutated function's dotted name: ``dualtape/files.py`` for
    ``dualtape.files.x_same_file`` or ``dualtape.files.xǁClassǁmethod``."""
    return "/".join(function.split(".")[:-1]) + ".py"


def scores(results: str) -> dict[str, Counter]:
    """Per module, how many mutants had each verdict, from ``mutmut results --all true``."""
    counts: dict[str, Counter] = {}
    for line in results.splitlines():
        found = LINE.match(line)
        if found:
            counts.setdefault(module_of(found["name"]), Counter())[found["status"]] += 1
    return counts


def summary(counts: dict[str, Counter]) -> list[str]:
    """One line per module and one for all: killed of counted, the percentage, the rest."""
    lines = []
    total: Counter = Counter()
    for module, verdicts in sorted(counts.items()):
        total.update(verdicts)
        lines.append(f"{module}: {line_of(verdicts)}")
    lines.append(f"all: {line_of(total)}")
    return lines


def line_of(verdicts: Counter) -> str:
    """``killed K of N (P%)`` and every other verdict's count."""
    killed = sum(verdicts[s] for s in KILLED)
    counted = sum(verdicts[s] for s in COUNTED)
    others = ", ".join(f"{s} {n}" for s, n in sorted(verdicts.items()) if s not in COUNTED)
    share = f"{100 * killed / counted:.1f}%" if counted else "none counted"
    return f"killed {killed} of {counted} ({share})" + (f"; {others}" if others else "")


def main(argv: list[str] | None = None) -> int:
    """Run mutmut on the chosen modules; exit 1 when any mutant survived."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="+", help="source files, e.g. dualtape/files.py")
    parser.add_argument("--tests", nargs="+", required=True,
                        help="test files (or pytest node ids) the mutants run against")
    parser.add_argument("-k", dest="keyword", help="pytest's -k: only the tests it selects")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="mutants run at once (default: every core)")
    parser.add_argument("--show", action="store_true", help="print each survivor's diff")
    parser.add_argument("--log", type=Path, help="mutmut's own progress output goes here")
    args = parser.parse_args(argv)
    tests = args.tests + (["-k", args.keyword] if args.keyword else [])
    with tempfile.TemporaryDirectory(prefix="dualtape-mutmut-") as folder:
        tree = Path(folder)
        copy_tree(tree)
        pyproject = tree / "pyproject.toml"
        pyproject.write_text(with_section(pyproject.read_text(),
                                          mutmut_section(args.modules, tests)))
        mutmut = [sys.executable, "-m", "mutmut"]
        # mutmut forks its children from a process that has run the tests once: a thread pool
        # (OpenBLAS, OpenMP, numba, torch) started there leaves its lock held in the children,
        # which then hang and are counted as time-outs, that is, as killed
        one_thread = {name: "1" for name in THREAD_COUNTS}
        with open(args.log or os.devnull, "w") as log:
            done = subprocess.run([*mutmut, "run", "--max-children", str(args.jobs)], cwd=tree,
                                  stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, **one_thread})
        if done.returncode != 0:
            print(f"mutmut run failed (exit {done.returncode}); see --log", file=sys.stderr)
            return 2
        results = subprocess.run([*mutmut, "results", "--all", "true"], cwd=tree,
                                 capture_output=True, text=True, check=True).stdout
        counts = scores(results)
        print("\n".join(summary(counts)))
        survivors = [line.split(":")[0].strip() for line in results.splitlines()
                     if line.rstrip().endswith(": survived")]
        for name in survivors if args.show else []:  # each named: show prints nothing for some
            shown = subprocess.run([*mutmut, "show", name], cwd=tree, capture_output=True,
                                   text=True)
            print(f"## {name}\n{shown.stdout}{shown.stderr[-1500:]}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
