"""The package's metadata: conda-env.yml and pyproject.toml name the same packages (and the
same minimum versions); the license ships in the wheel and the sdist; ``python -m dualtape``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
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


IMPORT_NAMES = {"sklearn": "scikit-learn"}
"""Distributions whose module has another name."""
OPTIONAL_BACKENDS = {"torch", "jax"}
"""Modules tests may skip without: the backend and reference libraries the README calls
optional (CuPy skips through the backend fixture, not importorskip)."""


def test_every_module_a_test_imports_or_skips_is_in_the_test_extra():
    # `pip install -e ".[test]"` must run every test that does not need a GPU or torch.
    if sys.version_info < (3, 11):
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+)")
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = {split(r)[0] for r in project["optional-dependencies"]["test"]}
    skipped_for = {
        normalise(IMPORT_NAMES.get(name, name))
        for folder in ("tests", "bench")
        for path in (ROOT / folder).glob("*.py")  # a submodule's distribution is its package's
        for name in re.findall(r"importorskip\(\s*[\"']([\w]+)[\w.]*[\"']", path.read_text())
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


# --- the license, in the metadata, the wheel and the sdist ----------------------------------

LICENSE = ROOT / "LICENSE"
BSD_2_CLAUSE = [
    "Redistribution and use in source and binary forms, with or without modification, are "
    "permitted provided that the following conditions are met:",
    "1. Redistributions of source code must retain the above copyright notice, this list of "
    "conditions and the following disclaimer.",
    "2. Redistributions in binary form must reproduce the above copyright notice, this list of "
    "conditions and the following disclaimer in the documentation and/or other materials "
    "provided with the distribution.",
    'THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"',
]


def pyproject() -> dict:
    if sys.version_info < (3, 11):
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+)")
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_license_file_is_the_bsd_2_clause_text_the_metadata_names():
    text = " ".join(LICENSE.read_text().split())
    assert text.startswith("BSD 2-Clause License Copyright (c) 2026, the dualtape authors ")
    for clause in BSD_2_CLAUSE:
        assert clause in text, clause
    assert "3." not in text, "a third clause makes it another license"
    project = pyproject()["project"]
    assert project["license"] == "BSD-2-Clause"
    assert project["license-files"] == ["LICENSE"]


def test_the_build_backend_is_new_enough_for_license_files():
    # setuptools reads PEP 639's license expression and license-files from 77.0 on.
    requires = [split(r) for r in pyproject()["build-system"]["requires"]]
    assert [name for name, _ in requires] == ["setuptools"]
    spec = requires[0][1]
    assert spec.startswith(">=") and int(spec[2:].split(".")[0]) >= 77, spec


@pytest.fixture(scope="module")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel and sdist of this checkout, built as pip builds them: the build requirements
    of pyproject.toml installed apart (not the test environment's setuptools), then
    setuptools' PEP 517 hooks, in a copy of the files git would commit."""
    folder = tmp_path_factory.mktemp("build")
    requires = pyproject()["build-system"]["requires"]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target",
                    str(folder / "backend"), *requires], check=True, timeout=300)
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (ROOT / name).is_file():
            (folder / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / "src" / name)
    hooks = ("from setuptools import build_meta as hooks; "
             "hooks.build_wheel('../dist'); hooks.build_sdist('../dist')")
    built = subprocess.run([sys.executable, "-S", "-c", hooks], cwd=folder / "src",
                           env={**os.environ, "PYTHONPATH": str(folder / "backend")},
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,), (sdist,) = (list((folder / "dist").glob(pattern)) for pattern in ("*.whl",
                                                                               "*.tar.gz"))
    return {"wheel": wheel, "sdist": sdist}


def test_the_wheel_carries_the_license_and_declares_it(distributions):
    with zipfile.ZipFile(distributions["wheel"]) as wheel:
        names = wheel.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        assert wheel.read(f"{info}/licenses/LICENSE") == LICENSE.read_bytes()
        metadata = wheel.read(f"{info}/METADATA").decode()
    assert "License-Expression: BSD-2-Clause" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()
    assert "dualtape/__main__.py" in names
    data = {"dualtape/kernels/lstm.cu", "dualtape/kernels/standard_lstm_gru.cu"}
    assert data <= set(names)


def test_the_sdist_carries_the_license(distributions):
    with tarfile.open(distributions["sdist"]) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        assert sdist.extractfile(f"{top}/LICENSE").read() == LICENSE.read_bytes()
        assert "License-File: LICENSE" in sdist.extractfile(f"{top}/PKG-INFO").read().decode()


# --- python -m dualtape -----------------------------------------------------------------------


def dualtape_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dualtape", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_python_m_dualtape_is_the_dualtape_command(capsys):
    from dualtape.cli import main

    done = dualtape_module("info")
    assert done.returncode == 0 and main(["info"]) == 0

    def timeless(text: str) -> str:  # how long the compiled loops took to be ready varies
        return re.sub(r"\(numba [^)]*\)", "(numba)", text)

    assert timeless(done.stdout) == timeless(capsys.readouterr().out)
    assert dualtape_module("--version").stdout.startswith("dualtape ")


def test_python_m_dualtape_exits_with_the_commands_status():
    refused = dualtape_module("bench", "--threads", "0")
    assert refused.returncode == 1
    assert refused.stderr == ("dualtape bench: --threads must be auto, unset or a whole number "
                              "of threads, 1 or more, got 0\n")
    usage = dualtape_module()
    assert usage.returncode == 2 and usage.stderr.startswith("usage: dualtape")
