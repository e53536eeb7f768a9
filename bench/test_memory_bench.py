"""The memory group of ``dualtape bench``: its rows, the peak measures (on known allocations and a
fake CuPy pool), the weights' comparison with the full tape (a planted difference), and the
torch-autograd row doing dualtape's maths with and without checkpoints. No timing."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from dualtape.backend import BackendUnavailable, resolve_backend
from dualtape.benchmarks import memory, report
from dualtape.benchmarks.measure import QUICK, Result, measure_workload
from dualtape.benchmarks.references import TorchAutogradRunner, torch_installed
from dualtape.benchmarks.runners import BackendRunner
from dualtape.benchmarks.workloads import WORKLOADS, select_workloads
from dualtape.cli import main

MEMORY = [w for w in WORKLOADS if w.group == "memory"]
MB = 1 << 20


def _memory(key: str) -> object:
    return next(w for w in MEMORY if w.key == key)


def test_the_memory_group_runs_only_when_named_and_quick_keeps_1000_steps():
    assert {(w.tape, w.steps) for w in MEMORY} == {(t, s) for t in ("full", "sqrt")
                                                   for s in (1_000, 10_000, 100_000)}
    assert all((w.size, w.batch, w.n_in) == (512, 1, 40) for w in MEMORY)
    assert not any(w.group == "memory" for w in select_workloads())
    assert select_workloads(["memory"]) == MEMORY
    assert {w.key for w in select_workloads(["memory"], quick=True)} == {
        "memory/full-tape-1000-steps", "memory/sqrt-tape-1000-steps"}


def test_a_failed_memory_measurement_is_an_error_row():
    unknown = replace(MEMORY[0], tape="every-other-step", steps=2)
    [result] = measure_workload(unknown, [BackendRunner(resolve_backend("numpy"))],
                                ["float64"], QUICK)
    assert result.error.startswith("ValueError: tape must be")  # timing it failed first
    [result] = measure_workload(replace(unknown, tape="full"), [Unrebuildable()], ["float64"],
                                QUICK)
    assert result.error.startswith("RuntimeError: the memory measurement failed: ValueError: "
                                   "unknown backend 'not-a-backend'"), result.error
    assert result.memory is None and len(result.samples) == QUICK.min_rounds


class Unrebuildable(BackendRunner):
    """dualtape on numpy under a label the measuring process cannot rebuild a runner from."""

    def __init__(self):
        super().__init__(resolve_backend("numpy"))
        self.label = "not-a-backend"


@pytest.mark.skipif(not torch_installed(), reason="the torch-autograd row needs torch")
def test_the_measuring_process_saves_the_weights_after_the_measured_call():
    small = replace(_memory("memory/sqrt-tape-1000-steps"), steps=12)
    ours = BackendRunner(resolve_backend("numpy")).prepare(small, "float64")
    ours()
    for runner in (BackendRunner(resolve_backend("numpy")), TorchAutogradRunner()):
        found = memory.measure(runner, small, "float64", threads=1)
        for name, w in ours.weights().items():
            np.testing.assert_allclose(found.weights[name], w, rtol=1e-10,
                                       atol=1e-12 * np.abs(w).max())
        assert found.rss is not None and found.rss >= 0
    assert found.allocated is None and found.allocated_by.startswith("not measured")


def test_each_call_starts_from_the_seeded_weights():
    small = replace(_memory("memory/sqrt-tape-1000-steps"), steps=30)
    call = BackendRunner(resolve_backend("numpy")).prepare(small, "float64")
    seeded = call.weights()
    call()
    once = call.weights()
    call()
    assert all(np.array_equal(once[k], v) for k, v in call.weights().items())
    assert not np.array_equal(once["0.U"], seeded["0.U"])


# --- the peak measures ----------------------------------------------------------------------


def test_the_resident_increase_sees_touched_pages_and_is_reset_before_each_call():
    size = 64 * MB
    grown, how = memory.resident_increase(lambda: np.ones(size // 8))
    if grown is None:
        pytest.skip(how)
    assert grown >= 0.9 * size and "VmHWM" in how
    assert memory.resident_increase(lambda: None)[0] < 16 * MB


def test_a_backend_without_a_measure_is_said_not_measured_and_not_run():
    ran = []
    peak, how = memory.allocation_peak("", lambda: ran.append(1))
    assert peak is None and how.startswith("not measured") and ran == []
    assert memory.allocation_peak("numpy", lambda: np.ones(1000))[0] >= 8000


@pytest.mark.gpu
def test_the_pool_peak_on_cupy_holds_an_array_made_during_the_call():
    try:
        backend = resolve_backend("cupy")
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    xp = backend.xp
    kept = []
    peak, how = memory.allocation_peak("cupy", lambda: kept.append(xp.ones(1 << 20)))
    assert peak >= kept[0].nbytes and how == "CuPy memory pool"
    assert memory.allocation_peak("cupy", lambda: None)[0] == 0


# --- the weights against the full tape's ----------------------------------------------------


def _row(key: str, runner: str, weights: dict, dtype: str = "float64") -> Result:
    result = Result(_memory(key), runner, False, dtype, samples=[1.5 if "sqrt" in key else 1.0])
    result.memory = memory.Memory(None, "not measured: test", 0, "test", weights)
    return result


def test_the_weights_difference_finds_a_planted_one_against_the_same_rows_full_tape():
    seeded = _memory("memory/full-tape-1000-steps").host_data("float64")["params"]
    full = {f"{k}.{n}": p + 0.5 for k, params in enumerate(seeded) for n, p in params.items()}
    planted = {k: v.copy() for k, v in full.items()}
    planted["1.U"][3, 2] += 0.25
    rows = [_row("memory/full-tape-1000-steps", "numpy", full),
            _row("memory/sqrt-tape-1000-steps", "numpy", planted),
            _row("memory/sqrt-tape-1000-steps", "torch", full),  # no full-tape row of its own
            _row("memory/sqrt-tape-1000-steps", "numpy", full, "float32")]  # nor in float32
    memory.compare_to_full_tape(rows)
    assert rows[1].memory.difference == pytest.approx(0.25)
    assert rows[1].memory.relative == pytest.approx(0.5)
    assert rows[0].memory.difference is None  # the full tape itself
    assert rows[2].memory.difference is None and rows[3].memory.difference is None
    table = report.memory_table(rows)
    assert "| memory/sqrt-tape-1000-steps | numpy | float64 | 1500 | 1.50× | not measured" in table
    assert "2.50e-01 | 5.00e-01 |" in table and "(itself)" in table


def test_weights_of_other_names_than_the_full_tapes_are_refused():
    rows = [_row("memory/full-tape-1000-steps", "numpy", {"0.W": np.zeros(2)}),
            _row("memory/sqrt-tape-1000-steps", "numpy", {"0.V": np.zeros(2)})]
    with pytest.raises(ValueError, match="against the full tape's"):
        memory.compare_to_full_tape(rows)


# --- the torch-autograd row -----------------------------------------------------------------


@pytest.mark.skipif(not torch_installed(), reason="the torch-autograd row needs torch")
@pytest.mark.parametrize("tape", ["full", "sqrt"])
def test_the_torch_row_updates_to_dualtapes_full_tape_weights(tape):
    steps = 12  # ⌈√12⌉ = 4: three checkpointed segments (longer: the rounding grows chaotically)
    ours = BackendRunner(resolve_backend("numpy")).prepare(
        replace(_memory("memory/full-tape-1000-steps"), steps=steps), "float64")
    ours()
    call = TorchAutogradRunner().prepare(
        replace(_memory(f"memory/{tape}-tape-1000-steps"), steps=steps), "float64")
    assert call.every == (None if tape == "full" else 4) and call.allocator == ""
    call()
    call()  # from the seeded weights again
    theirs = call.weights()
    assert theirs.keys() == ours.weights().keys()
    for name, w in ours.weights().items():
        np.testing.assert_allclose(theirs[name], w, rtol=1e-10, atol=1e-12 * np.abs(w).max())


def test_the_memory_table_is_empty_without_memory_rows():
    assert report.memory_table([Result(MEMORY[0], "numpy", False, "float64")]) == ""
    assert memory.Memory(1, "a", 2, "b").as_dict()["weights_relative_difference"] is None


# --- end to end (last: the slowest) ---------------------------------------------------------


def test_bench_memory_reports_both_tapes_peaks_and_equal_weights(tmp_path, capsys):
    out = {k: tmp_path / f"m.{k}" for k in ("json", "md")}
    status = main(["bench", "--quick", "--workloads", "memory", "--backends", "numpy",
                   "--dtypes", "float64", "--references", "none", "--json", str(out["json"]),
                   "--markdown", str(out["md"])])
    printed = capsys.readouterr().out
    assert status == 0
    assert "Memory of one training call:" in printed
    assert "| memory/full-tape-1000-steps | numpy | float64 |" in printed
    records = {r["tape"]: r for r in json.loads(out["json"].read_text())["results"]}
    full, sqrt = records["full"]["memory"], records["sqrt"]["memory"]
    assert full["allocated_by"] == sqrt["allocated_by"] == "tracemalloc"
    # the full tape holds every step: at least 1,000 steps x (4 gates x 512 + ...) doubles
    assert full["allocated_bytes"] > 1_000 * 4 * 512 * 8
    assert sqrt["allocated_bytes"] < full["allocated_bytes"] / 2
    assert full["rss_bytes"] > sqrt["rss_bytes"] >= 0 and "VmHWM" in full["rss_by"]
    assert full["weights_max_abs_difference"] is None
    assert 0 <= sqrt["weights_relative_difference"] < 1e-10
    page = out["md"].read_text()
    assert "## Memory of one training call" in page and "(itself)" in page


def test_the_smoke_versions_of_the_memory_rows_are_two_steps_long():
    assert {w.smoke().steps for w in MEMORY} == {2} and max(w.steps for w in MEMORY) == 100_000
