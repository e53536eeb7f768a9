"""The main job's reference rows in ``dualtape bench``: which rows run it, the notes when a
library is missing, how a thread limit reaches JAX, and the chars/s report. No timing."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from dualtape.benchmarks import report
from dualtape.benchmarks.cli import NO_JAX, NO_TORCH
from dualtape.benchmarks.measure import Result
from dualtape.benchmarks.references import (
    JAX_SINGLE_THREAD,
    JaxRunner,
    jax_installed,
    jax_threads,
    reference_runners,
    torch_installed,
)
from dualtape.benchmarks.workloads import WORKLOADS

from .test_benchmark_cli import bench, refusal

MAIN_JOB = next(w for w in WORKLOADS if w.op == "text")
NOTHING_TIMED = ("--backends", "numpy", "--workloads", "update/matrix-60x60")


def test_the_main_job_has_a_row_from_each_installed_reference():
    expected = ({"torch-autograd", "torch.nn.LSTM"} if torch_installed() else set()) | (
        {"jax"} if jax_installed() else set())
    covering = set()
    for runner in reference_runners():
        run = runner.prepare(MAIN_JOB.smoke(), "float32")
        if run is not None:
            assert np.isfinite(float(run()))
            runner.synchronize()
            covering.add(runner.label)
    assert covering == expected


@pytest.fixture
def no_jax(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # find_spec and import both find no JAX


def test_all_references_without_jax_say_so_once_and_run_the_others(capsys, no_jax):
    assert not jax_installed()
    assert "jax" not in {r.label for r in reference_runners()}
    status, out = bench(capsys, *NOTHING_TIMED)
    assert status == 0 and out.count(NO_JAX) == 1 and "ref:jax" not in out
    assert out.startswith(f"note: {NO_JAX}\n") or f"\nnote: {NO_JAX}\n" in out


def test_a_jax_reference_without_jax_says_jax_is_missing(capsys, no_jax):
    line = refusal(capsys, *NOTHING_TIMED, "--references", "naive,jax")
    assert line.endswith("--references jax needs jax, which is not installed here: "
                         "pip install jax")


def test_without_torch_or_jax_both_notes_come(capsys, no_jax, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    status, out = bench(capsys, *NOTHING_TIMED)
    assert status == 0 and out.startswith(f"note: {NO_TORCH}\nnote: {NO_JAX}\n")


@pytest.fixture
def jax_not_started(monkeypatch):
    """``XLA_FLAGS`` restored after the test, and JAX seen as not started yet."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    monkeypatch.setitem(sys.modules, "jax._src.xla_bridge",
                        SimpleNamespace(backends_are_initialized=lambda: False))


def test_one_thread_reaches_jax_through_its_flags_kept_beside_the_users(jax_not_started):
    assert jax_threads(1) == f"jax: one thread in products (XLA_FLAGS {JAX_SINGLE_THREAD})"
    assert os.environ["XLA_FLAGS"] == f"--xla_dump_to=/tmp/x {JAX_SINGLE_THREAD}"
    jax_threads(1)
    assert os.environ["XLA_FLAGS"] == f"--xla_dump_to=/tmp/x {JAX_SINGLE_THREAD}"


@pytest.mark.parametrize(("threads", "says"), [
    (None, "jax: XLA's own threads (not limited)"),
    (2, "jax: XLA's own threads: XLA has no thread count, so --threads 2 does not reach it"),
])
def test_no_limit_or_more_than_one_thread_leaves_jax_alone(jax_not_started, threads, says):
    assert jax_threads(threads) == says
    assert os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x"


def test_a_jax_that_has_started_is_not_said_to_be_limited(jax_not_started, monkeypatch):
    monkeypatch.setitem(sys.modules, "jax._src.xla_bridge",
                        SimpleNamespace(backends_are_initialized=lambda: True))
    assert jax_threads(1) == ("jax: XLA's own threads: JAX started before --threads 1 could "
                              "reach it")
    assert os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x"


def test_bench_threads_1_reaches_the_jax_row_and_says_so(capsys, jax_not_started):
    if not jax_installed():
        pytest.skip("JAX is not installed")
    pytest.importorskip("threadpoolctl")
    status, out = bench(capsys, *NOTHING_TIMED, "--references", "jax", "--threads", "1")
    assert status == 0
    assert f"note: jax: one thread in products (XLA_FLAGS {JAX_SINGLE_THREAD})" in out


def test_the_jax_row_waits_for_every_model_it_made():
    blocked = []
    runner = JaxRunner()
    runner.models = [SimpleNamespace(block=lambda k=k: blocked.append(k)) for k in range(2)]
    runner.synchronize()
    assert blocked == [0, 1]


# --- chars/s ----------------------------------------------------------------------------------


def text_row(runner: str, ms: float | None, reference: bool = True) -> Result:
    result = Result(MAIN_JOB, runner, reference, "float32",
                    samples=[] if ms is None else [ms / 1e3])
    result.error = None if ms is not None else "RuntimeError: no device"
    return result


def test_the_chars_per_second_table_has_every_timed_text_row_and_its_ratio():
    results = [text_row("numpy", 16.0, reference=False), text_row("jax", 8.0),
               text_row("torch.nn.LSTM", None), Result(WORKLOADS[0], "numpy", False, "float32",
                                                       samples=[0.001])]
    lines = report.throughput(results).splitlines()
    assert lines[0] == "| workload | backend | dtype | chars/s | × faster than numpy |"
    rows = [line for line in lines if line.startswith("| text/")]
    assert rows == ["| text/char-model-80x80-batch-32 | numpy | float32 | 100,000 | 1.00× |",
                    "| text/char-model-80x80-batch-32 | ref:jax | float32 | 200,000 | 2.00× |"]
    assert report.throughput(results[3:]) == ""


def test_the_markdown_page_has_chars_per_second_only_with_text_rows(tmp_path):
    meta = {**report.system_info("auto", "auto", ["numpy"]), "command": "dualtape bench"}
    page = tmp_path / "page.md"
    report.write_markdown(str(page), [text_row("numpy", 16.0, reference=False)], meta)
    text = page.read_text()
    assert "## Characters per second\n\n| workload | backend | dtype | chars/s |" in text
    report.write_markdown(str(page), [Result(WORKLOADS[0], "numpy", False, "float32", [0.001])],
                          meta)
    assert "Characters per second" not in page.read_text()


def test_bench_prints_the_main_jobs_chars_per_second(capsys):
    status, out = bench(capsys, "--backends", "numpy", "--references", "none",
                        "--workloads", "text", "--dtypes", "float32")
    assert status == 0
    section = out.split("Characters per second:\n", 1)[1]
    assert section.startswith("| workload | backend | dtype | chars/s | × faster than numpy |")
    assert "| text/char-model-80x80-batch-32 | numpy | float32 | " in section
