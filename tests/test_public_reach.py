"""The applications (``dualtape/text``, ``dualtape/benchmarks``) use the core through its public
names only: no ``x._name`` for a private name the core defines (a layer's or network's
private method, a module's private function), and no ``from ..core import _name``.

The source is read with ``ast``, as ``test_import_direction.py`` reads imports. A private
name the core defines counts as a reach wherever an application touches it, unless on
``self`` or ``cls`` of an application class that defines that name itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .test_import_direction import PACKAGE, is_within, module_name

REACH_CHECKED = ("dualtape.text", "dualtape.benchmarks")
APPLICATIONS = (*REACH_CHECKED, "dualtape.cli", "dualtape.__main__")


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def defined_private_names(paths: list[Path]) -> set[str]:
    """Every private name ``paths`` define: functions, classes and methods, module and class
    variables, and attributes assigned on ``self``/``cls``."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return {n for n in names if is_private(n)}


def imported_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module name a ``from ... import`` in ``module`` reads."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    anchor = parts[: len(parts) - node.level + 1]
    return ".".join([*anchor, node.module] if node.module else anchor)


def private_reaches(root: Path) -> list[str]:
    """``"module:line name"`` for each use of a core private name in an application."""
    paths = sorted(root.rglob("*.py"))
    apps = [p for p in paths if is_within(module_name(p, root), APPLICATIONS)]
    core = defined_private_names([p for p in paths if p not in apps])
    checked = [p for p in apps if is_within(module_name(p, root), REACH_CHECKED)]
    own = defined_private_names(checked)
    found: list[tuple[str, int, str]] = []
    for path in checked:
        module = module_name(path, root)
        for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                source = imported_from(node, module, path.name == "__init__.py")
                if is_within(source, ("dualtape",)) and not is_within(source, APPLICATIONS):
                    found += [(module, node.lineno, alias.name) for alias in node.names
                              if is_private(alias.name)]
            elif isinstance(node, ast.Attribute) and node.attr in core:
                on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                if not (on_self and node.attr in own):
                    found.append((module, node.lineno, node.attr))
    return [f"{module}:{line} {name}" for module, line, name in sorted(found)]


def test_the_applications_reach_no_private_name_of_the_core():
    assert private_reaches(PACKAGE) == []


def _planted(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "dualtape"
    for sub in ("", "text", "benchmarks"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "__init__.py").write_text("")
    (root / "recurrent.py").write_text(
        "def _helper():\n    pass\n\nclass R:\n    def _forward(self):\n        self._cache = 1\n")
    for relative, source in files.items():
        (root / relative).write_text(source)
    return root


def test_a_planted_private_method_call_is_caught(tmp_path):
    root = _planted(tmp_path, {"text/trainer.py": "def f(net):\n    return net._forward()\n"})
    assert private_reaches(root) == ["dualtape.text.trainer:2 _forward"]


def test_a_planted_private_import_and_module_function_are_caught(tmp_path):
    root = _planted(tmp_path, {"benchmarks/run.py": (
        "from ..recurrent import _helper\nfrom .. import recurrent\n"
        "def f(r):\n    return recurrent._helper(), r._cache\n")})
    assert private_reaches(root) == ["dualtape.benchmarks.run:1 _helper",
                                     "dualtape.benchmarks.run:4 _cache",
                                     "dualtape.benchmarks.run:4 _helper"]


def test_an_applications_own_private_names_and_public_core_names_pass(tmp_path):
    root = _planted(tmp_path, {"text/trainer.py": (
        "from ..recurrent import R\nfrom . import model\n"
        "class T:\n    def _forward(self):\n        return self._forward, model._mine, R()\n"),
        "text/model.py": "def _mine():\n    pass\n"})
    assert private_reaches(root) == []
