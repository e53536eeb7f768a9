"""``dualtape bench`` runs end to end and reports; a failing runner becomes an error row."""

from __future__ import annotations

import json

import pytest

from dualtape.backend import resolve_backend
from dualtape.benchmarks.measure import (
    QUICK,
    WORKLOADS,
    BackendRunner,
    measure_workload,
    select_workloads,
)
from dualtape.cli import main


def test_bench_command_writes_json_markdown_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = {k: tmp_path / f"r.{k}" for k in ("json", "md", "png")}
    status = main(["bench", "--quick", "--backends", "numpy", "--dtypes", "float64",
                   "--workloads", "update/matrix-60x60,lstm/forwards-60", "--references", "naive",
                   "--json", str(out["json"]), "--markdown", str(out["md"]),
                   "--plot", str(out["png"])])
    assert status == 0
    printed = capsys.readouterr().out
    assert "| lstm/forwards-60 | ref:naive | float64 |" in printed
    records = json.loads(out["json"].read_text())
    assert {r["runner"] for r in records["results"]} == {"numpy", "naive"}
    assert records["meta"]["threads"]["requested"] is None
    assert "Re-run with" in out["md"].read_text()
    assert out["png"].stat().st_size > 0


def test_unknown_workload_names_the_known_ones():
    with pytest.raises(ValueError, match="train/fifty-time-steps"):
        select_workloads(["train/fifty-steps"])


def test_quick_drops_only_the_batches_above_32():
    assert {w.key for w in WORKLOADS} - {w.key for w in select_workloads(quick=True)} == {
        "train/fifty-time-steps-batch-64", "train/fifty-time-steps-batch-256"}


class Broken:
    label, reference = "broken", True

    def prepare(self, workload, dtype):
        raise RuntimeError("no device")

    def synchronize(self):
        pass


def test_a_failing_runner_is_an_error_row_and_the_others_still_run():
    workload = next(w for w in WORKLOADS if w.key == "update/matrix-60x60")
    results = measure_workload(workload, [Broken(), BackendRunner(resolve_backend("numpy"))],
                               ["float32"], QUICK)
    broken, numpy = results
    assert broken.error == "RuntimeError: no device" and not broken.samples
    assert numpy.error is None and len(numpy.samples) >= QUICK.min_rounds
