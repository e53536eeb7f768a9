"""The arrows point one way: applications -> core, and nothing in ``dualtape/`` imports ``bench/``;
and import-linter's contracts (``pyproject.toml``: the core's floors in order, no import cycle
anywhere in the package) hold, and fail when broken.

Imports are read from the source with ``ast``, so an import inside a function (the lazy kind
the package uses for heavy modules) counts as much as one at the top of a file.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dualtape"
APPLICATIONS = ("dualtape.text", "dualtape.benchmarks", "dualtape.cli", "dualtape.__main__")


def module_name(path: Path, root: Path) -> str:
    """``dualtape.layers.lstm`` for ``root/layers/lstm.py``, ``dualtape.layers`` for its
    ``__init__.py``."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, relative imports resolved."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def is_within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def wrong_way_imports(root: Path) -> list[str]:
    """``"importer -> imported"`` for each core module importing an application and each
    package module importing the top-level ``bench`` folder."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        importer = module_name(path, root)
        for imported in sorted(imported_modules(path, root)):
            if is_within(imported, ("bench",)) or (
                not is_within(importer, APPLICATIONS) and is_within(imported, APPLICATIONS)
            ):
                problems.append(f"{importer} -> {imported}")
    return problems


def test_the_core_imports_no_application_and_nothing_imports_bench():
    assert wrong_way_imports(PACKAGE) == []


def test_the_check_sees_the_core_modules_and_their_imports():
    names = {module_name(p, PACKAGE) for p in PACKAGE.rglob("*.py")}
    assert {"dualtape.backend", "dualtape.layers.lstm", "dualtape.text.trainer",
            "dualtape.benchmarks.measure"} <= names
    assert "dualtape.backend" in imported_modules(PACKAGE / "layers" / "lstm.py", PACKAGE)
    assert "dualtape.text.model" in imported_modules(PACKAGE / "text" / "trainer.py", PACKAGE)


def _planted(tmp_path: Path, relative: str, source: str) -> Path:
    root = tmp_path / "dualtape"
    for sub in ("layers", "text"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "__init__.py").write_text("")
    (root / "__init__.py").write_text("from .layers import x\n")
    (root / relative).write_text(source)
    return root


def test_a_planted_lazy_import_of_an_application_is_caught(tmp_path):
    root = _planted(tmp_path, "layers/lstm.py", "def f():\n    from ..text import model\n")
    assert wrong_way_imports(root) == ["dualtape.layers.lstm -> dualtape.text",
                                       "dualtape.layers.lstm -> dualtape.text.model"]


def test_a_planted_import_of_the_bench_folder_is_caught(tmp_path):
    root = _planted(tmp_path, "text/cli.py", "import bench.references\n")
    assert wrong_way_imports(root) == ["dualtape.text.cli -> bench.references"]


def test_applications_may_import_the_core(tmp_path):
    root = _planted(tmp_path, "text/model.py", "from ..layers import LSTM\nfrom . import cli\n")
    assert wrong_way_imports(root) == []


def core_importers_of(root: Path, target: str) -> list[str]:
    """The core modules below the package's top that import ``target``."""
    return sorted(module_name(p, root) for p in root.rglob("*.py")
                  if module_name(p, root) not in (root.name, target)
                  and not is_within(module_name(p, root), APPLICATIONS)
                  and any(is_within(i, (target,)) for i in imported_modules(p, root)))


ABOVE_TRAINING = ["dualtape.call_peak"]
"""The core's one module that runs training calls (the floor between ``tape_report`` and
``training`` in ``pyproject.toml``): it measures one call's peak memory."""


def test_training_sits_above_the_networks_and_nothing_in_the_core_imports_it():
    """Data flows down: training -> networks -> layers -> kernels; only the package's
    ``__init__``, the applications and ``call_peak`` import ``dualtape.training``."""
    assert core_importers_of(PACKAGE, "dualtape.training") == ABOVE_TRAINING
    imported = imported_modules(PACKAGE / "training.py", PACKAGE)
    assert {"dualtape.network", "dualtape.recurrent"} <= imported


def test_a_planted_import_of_training_from_below_is_caught(tmp_path):
    root = _planted(tmp_path, "layers/lstm.py", "def f():\n    from .. import training\n")
    (root / "layers" / "relu.py").write_text("from .. import backend\n")
    assert core_importers_of(root, "dualtape.training") == ["dualtape.layers.lstm"]


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's contracts of ``pyproject.toml`` (the core's floors, no import cycle)
    checked on the package under ``root``."""
    command = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(command), "--config", str(root / "pyproject.toml"), "--no-cache"],
                          cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})


def test_the_import_contracts_hold():
    done = lint_imports(PACKAGE.parent)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("where, line, broken", [
    ("layers/base.py", "from ..text import model", "dualtape.layers is not allowed to import "
     "dualtape.text"),
    ("kernels/windows.py", "from . import selfcheck", "No import cycle anywhere in the package "
     "BROKEN"),
], ids=["up-a-floor", "cycle"])
def test_the_contracts_catch_an_import_up_a_floor_and_a_cycle(tmp_path, where, line, broken):
    shutil.copytree(PACKAGE, tmp_path / "dualtape")
    shutil.copy(PACKAGE.parent / "pyproject.toml", tmp_path)
    planted = tmp_path / "dualtape" / where
    planted.write_text(planted.read_text() + f"\n{line}  # planted\n")
    if where.startswith("kernels"):  # and back: selfcheck imports windows
        back = tmp_path / "dualtape" / "kernels" / "selfcheck.py"
        back.write_text(back.read_text() + "\nfrom . import windows  # planted\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1 and broken in done.stdout, done.stdout
