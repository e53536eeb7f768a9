"""conda-env.yml and pyproject.toml name the same packages (and the same minimum versions)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# conda's one `cupy` package stands for the CUDA-specific wheels of the cuda12/cuda13 extras;
# conda-forge calls NVRTC cuda-nvrtc.
CONDA_NAMES = {"cupy-cuda12x": "cupy", "cupy-cuda13x": "cupy", "nvidia-cuda-nvrtc": "cuda-nvrtc"}
NOT_PACKAGES = {"python", "pip"}
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def split(requirement: str) -> tuple[str, str]:
    """``("array-api-strict", ">=2.2")`` from ``"array_api_strict >= 2.2"``."""
    match = REQUIREMENT.match(requirement)
    assert match, f"cannot read the requirement {requirement!r}"
    return normalise(match.group(1)), match.group(3).split(";")[0].replace(" ", "")


def pyproject_requirements() -> dict[str, str]:
    if sys.version_info < (3, 11):
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+)")
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    requirements = {}
    for line in [*project["dependencies"], *extras["test"], *extras["bench"],
                 *extras["cuda12"], *extras["cuda13"]]:
        name, spec = split(line)
        name = CONDA_NAMES.get(name, name)
        requirements[name] = spec or requirements.get(name, "")
    return requirements


def conda_requirements() -> dict[str, str]:
    """The top-level ``dependencies:`` entries of conda-env.yml (not the nested pip list)."""
    requirements = {}
    in_dependencies = False
    for raw in (ROOT / "conda-env.yml").read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line:
            continue
        if not line.startswith(" "):
            in_dependencies = line.startswith("dependencies:")
            continue
        item = re.match(r"^  - (\S.*)$", line)  # exactly one level in: not the pip sub-list
        if in_dependencies and item and not item.group(1).endswith(":"):
            # conda writes "pkg>=1.0" or "pkg 1.0.*"; pins here use the pip form.
            name, spec = split(item.group(1))
            if name not in NOT_PACKAGES:
                requirements[name] = spec
    return requirements


def test_conda_env_and_pyproject_name_the_same_packages():
    conda, pyproject = conda_requirements(), pyproject_requirements()
    assert sorted(conda) == sorted(pyproject), (
        f"only in conda-env.yml: {sorted(set(conda) - set(pyproject))}; "
        f"only in pyproject.toml: {sorted(set(pyproject) - set(conda))}"
    )


def test_conda_env_and_pyproject_agree_on_minimum_versions():
    conda, pyproject = conda_requirements(), pyproject_requirements()
    for name in set(conda) & set(pyproject):
        if conda[name] and pyproject[name]:
            assert conda[name] == pyproject[name], name


def test_conda_env_installs_the_package_itself_with_pip():
    text = (ROOT / "conda-env.yml").read_text()
    assert re.search(r"^\s+- pip:\s*$", text, re.MULTILINE)
    assert re.search(r"^\s+- -e \.", text, re.MULTILINE)


def test_core_dependencies_are_numpy_and_array_api_compat_only():
    if sys.version_info < (3, 11):
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+)")
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert sorted(split(r)[0] for r in project["dependencies"]) == ["array-api-compat", "numpy"]
    assert project["scripts"]["dualtape"] == "dualtape.cli:main"
    cupy = {"cuda12": "cupy-cuda12x", "cuda13": "cupy-cuda13x"}
    for extra, wheel in cupy.items():
        requirements = [split(r) for r in project["optional-dependencies"][extra]]
        assert [name for name, _ in requirements] == [wheel]
        assert all("<" not in spec for _, spec in requirements), "no upper pins on CuPy"


def test_the_parsers_read_what_they_should():
    # Guards the two tiny parsers above against silently reading nothing.
    assert split("array_api_strict >= 2.2") == ("array-api-strict", ">=2.2")
    assert split("Cupy-CUDA12x") == ("cupy-cuda12x", "")
    conda = conda_requirements()
    assert {"numpy", "array-api-compat", "cupy", "pytest"} <= set(conda)
    assert "-e" not in " ".join(conda) and "python" not in conda


def test_the_package_says_it_is_typed():
    if sys.version_info < (3, 11):
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+)")
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in data["package-data"]["dualtape"]
    assert (ROOT / "dualtape" / "py.typed").is_file()


OPTIONAL_BACKENDS = {"torch"}
"""Modules tests may skip without: backends the README calls optional (CuPy skips through the
backend fixture, not importorskip)."""


def test_every_module_a_test_imports_or_skips_is_in_the_test_extra():
    # `pip install -e ".[test]"` must run every test that does not need a GPU or torch.
    if sys.version_info < (3, 11):
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+)")
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = {split(r)[0] for r in project["optional-dependencies"]["test"]}
    skipped_for = {
        normalise(name)
        for folder in ("tests", "bench")
        for path in (ROOT / folder).glob("*.py")
        for name in re.findall(r"importorskip\(\s*[\"']([\w.]+)[\"']", path.read_text())
    }
    assert "threadpoolctl" in skipped_for, "the scan above found nothing it should"
    assert skipped_for - OPTIONAL_BACKENDS <= extra, sorted(skipped_for - extra)


def test_plain_pytest_reports_why_tests_skip(tmp_path):
    # The README promises that skipped tests say why: pytest's own summary, from addopts.
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\ndef test_it():\n    pytest.skip('the reason a user should read')\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-p",
         "no:cacheprovider", str(tmp_path / "test_skips.py")],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert "SKIPPED [1]" in run.stdout and "the reason a user should read" in run.stdout, run.stdout


def test_a_missing_backend_is_reported_once_not_once_per_test():
    # The backend fixture's skips are folded into one summary line per reason (conftest.py).
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/test_losses.py"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    reasons = [line.split(": ", 1)[1] for line in run.stdout.splitlines()
               if line.startswith("SKIPPED [")]
    assert run.returncode == 0, run.stdout[-2000:]
    assert len(reasons) == len(set(reasons)), "\n".join(reasons)
