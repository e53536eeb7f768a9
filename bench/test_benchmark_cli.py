"""``dualtape bench`` runs end to end and reports; a failing runner becomes an error row."""

from __future__ import annotations

import argparse
import json
import sys

import pytest

from dualtape.backend import available_backends, resolve_backend
from dualtape.benchmarks import cli, report
from dualtape.benchmarks.bound import LABEL as BOUND_LABEL
from dualtape.benchmarks.measure import QUICK, Result, measure_workload
from dualtape.benchmarks.runners import BackendRunner
from dualtape.benchmarks.workloads import WORKLOADS, select_workloads
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
    assert records["meta"]["threads"]["requested"] == "auto"
    assert {r["threads"] for r in records["results"]} == {1}, "small rows run on one thread"
    assert "Re-run with" in out["md"].read_text()
    assert out["png"].stat().st_size > 0


def test_unknown_workload_names_the_known_ones():
    with pytest.raises(ValueError, match="train/fifty-time-steps"):
        select_workloads(["train/fifty-steps"])


def test_quick_drops_only_the_batches_above_32():
    assert {w.key for w in select_workloads()} - {w.key for w in select_workloads(quick=True)} == {
        "train/fifty-time-steps-batch-64", "train/fifty-time-steps-batch-256"}


@pytest.mark.parametrize(("options", "dtypes"), [
    ([], ["float32", "float64"]), (["--quick"], ["float32"]),
    (["--quick", "--dtypes", "float64,float32"], ["float64", "float32"]),
], ids=["full", "quick", "quick-with-dtypes"])
def test_quick_times_float32_unless_dtypes_are_given(options, dtypes):
    """``--quick`` keeps its minute: float64 would double it (``cli.QUICK_DTYPES``)."""
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args([*options, "--workloads", "update/matrix-60x60",
                              "--backends", "numpy", "--references", "none"])
    assert cli.check(args).dtypes == dtypes
    assert ("--dtypes" in cli.command_line(args)) == ("--dtypes" in options)


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


def bench(capsys, *options: str) -> tuple[int | str | None, str]:
    """``dualtape bench --quick --dtypes float64 OPTIONS`` -> (exit status or refusal, stdout)."""
    try:
        status = main(["bench", "--quick", "--dtypes", "float64", *options])
    except SystemExit as exc:
        status = exc.code
    return status, capsys.readouterr().out


def refusal(capsys, *options: str) -> str:
    """The one line ``dualtape bench`` refuses ``options`` with, before printing (notes
    included) or timing anything."""
    status, out = bench(capsys, *options)
    assert isinstance(status, str) and status.startswith("dualtape bench: "), status
    assert "\n" not in status and out == "", out
    return status


def test_an_unknown_workload_is_one_line(capsys):
    assert "unknown workloads ['foo']" in refusal(capsys, "--workloads", "foo")


def test_an_unknown_backend_is_one_line(capsys):
    assert "unknown backend 'foo'" in refusal(capsys, "--backends", "foo")


def test_a_torch_reference_without_torch_says_torch_is_missing(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    line = refusal(capsys, "--backends", "numpy", "--references", "naive,torch-autograd")
    assert "torch-autograd needs torch, which is not installed" in line
    assert "unknown" not in line


def test_all_references_without_torch_say_so_once_and_run_the_others(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    status, out = bench(capsys, "--backends", "numpy", "--workloads", "lstm/forwards-60")
    assert status == 0
    assert out.count("torch is not installed") == 1 and "pip install torch" in out
    assert "| lstm/forwards-60 | ref:naive | float64 |" in out


def test_backends_none_of_which_can_run_are_refused(capsys):
    missing = sorted({"cupy", "torch"} - set(available_backends()))
    if not missing:
        pytest.skip("cupy and torch both work here")
    line = refusal(capsys, "--backends", missing[0], "--references", "none",
                   "--workloads", "update/matrix-60x60")
    assert "none of the requested backends can run here" in line and missing[0] in line
    status, out = bench(capsys, "--backends", f"numpy,{missing[0]}", "--references", "none",
                        "--workloads", "update/matrix-60x60")
    assert status == 0 and f"note: skipped backend {missing[0]}" in out


def test_without_comparisons_there_is_no_ratio_column_and_no_threads_none(capsys, monkeypatch):
    monkeypatch.setattr(cli, "usable_cores", lambda: 1)  # no core free for the gradients
    status, out = bench(capsys, "--backends", "numpy", "--references", "none",
                        "--workloads", "update/matrix-60x60")
    assert status == 0
    assert "None" not in out
    assert ("- threads: --threads auto, train-text's rule for each row's time loop: 1 for every "
            "row; --threads N or unset overrides: ") in out
    assert "| update/matrix-60x60 | numpy | float64 |" in out
    assert "faster than numpy |" not in out and "1.00×" not in out
    assert out.rstrip().splitlines()[-1].startswith("Read: the median ms per call")


def test_the_requested_thread_limit_is_in_the_header(capsys):
    pytest.importorskip("threadpoolctl")
    status, out = bench(capsys, "--backends", "numpy", "--references", "none", "--threads", "1",
                        "--workloads", "update/matrix-60x60")
    assert status == 0 and "- threads: --threads 1: " in out
    status, out = bench(capsys, "--backends", "numpy", "--references", "none", "--threads",
                        "unset", "--workloads", "update/matrix-60x60")
    assert status == 0 and "- threads: --threads unset: " in out


def timed(runner: str, ms: float, key: str = "train/one-time-step",
          reference: bool = True) -> Result:
    workload = next(w for w in WORKLOADS if w.key == key)
    return Result(workload, runner, reference, "float64", samples=[ms / 1e3])


def test_every_ratio_is_times_faster_than_numpy():
    results = [timed("numpy", 2.0, reference=False), timed("naive", 4.0),
               timed(BOUND_LABEL, 1.0), timed("torch", 1.0, reference=False)]
    rows = {line.split(" | ")[1]: line for line in report.table(results).splitlines()
            if line.startswith("| train/")}
    assert rows["ref:naive"].endswith("| 0.50× |") and rows["torch"].endswith("| 2.00× |")
    assert rows["numpy"].endswith("| 1.00× |")
    ratios = report.ratios(results)
    assert "| naive: × faster than numpy |" in ratios and BOUND_LABEL not in ratios
    assert "| train/one-time-step | float64 | 0.50× |" in ratios
    bound = report.bound_distance(results)
    assert "| bound: × faster than numpy |" in bound
    assert "| train/one-time-step | float64 | 2.00 | 1.00 | 2.00× |" in bound
    assert report.how_to_read(results).startswith('Read: "× faster than numpy" above 1')


def test_the_header_states_the_ratio_convention(capsys):
    status, out = bench(capsys, "--backends", "numpy", "--references", "naive",
                        "--workloads", "lstm/forwards-60")
    assert status == 0
    assert "- ratios: × faster than numpy = dualtape-on-numpy's median / the row's" in out
    assert out.rstrip().splitlines()[-1].startswith('Read: "× faster than numpy"')


def test_reference_rows_come_from_the_package_not_a_source_checkout(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "bench", None)  # as in an installed copy: no bench/ folder
    status, out = bench(capsys, "--backends", "numpy", "--references", "naive",
                        "--workloads", "lstm/forwards-60")
    assert status == 0 and "| lstm/forwards-60 | ref:naive | float64 |" in out


def test_compare_devices_states_its_targets_in_times_faster_than_numpy():
    from bench.compare_devices import targets

    key = "train/fifty-time-steps"
    results = [timed("numpy", 10.0, key, reference=False), timed("naive", 50.0, key),
               timed("torch-autograd", 8.0, key)]
    text = targets(results, {"threads": {"requested": 1}})
    assert "| reference | its median | × faster than numpy | target | met |" in text
    assert "| naive | 50.0 ms | 0.20× | ≤ 0.25× | yes |" in text
    assert "| torch-autograd | 8.0 ms | 1.25× | < 1× | no |" in text


def test_each_row_is_compared_with_numpy_in_its_own_dtype():
    def row(runner: str, ms: float, dtype: str) -> Result:
        result = timed(runner, ms, reference=runner != "numpy")
        result.dtype = dtype
        return result

    results = [row("numpy", 2.0, "float32"), row("numpy", 8.0, "float64"),
               row("naive", 4.0, "float32"), row("naive", 4.0, "float64")]
    naive = [line for line in report.table(results).splitlines() if "| ref:naive |" in line]
    assert naive[0].endswith("| float32 | 4.00 | 4.00–4.00 | 0.50× |")
    assert naive[1].endswith("| float64 | 4.00 | 4.00–4.00 | 2.00× |")


def test_the_header_names_the_blas_kernels_and_whether_the_environment_chose_them():
    pool = {"internal_api": "openblas", "version": "0.3.31", "prefix": "libscipy_openblas",
            "architecture": "Haswell", "num_threads": 1}
    forced = report._threads_text({"pools": [pool | {"coretype": "Haswell"}]})
    assert forced == ("openblas 0.3.31 (libscipy_openblas, Haswell kernels, as "
                      "OPENBLAS_CORETYPE sets): 1")
    assert report._threads_text({"pools": [pool]}) == ("openblas 0.3.31 (libscipy_openblas, "
                                                       "Haswell kernels): 1")
    del pool["architecture"]
    assert report._threads_text({"pools": [pool]}) == "openblas 0.3.31 (libscipy_openblas): 1"


def test_without_an_openblas_coretype_setting_none_is_recorded(monkeypatch):
    pytest.importorskip("threadpoolctl")
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    assert all("coretype" not in p for p in report.thread_info("auto", "")["pools"])


def test_auto_threads_are_train_texts_rule_for_each_rows_time_loop(monkeypatch):
    # On an idle 4-core machine only the rows whose loop product passes 8 M multiply-adds (the
    # 512-unit train rows from batch 32: 32 · 512 · 3 · 512 = 25 M) get more than one thread.
    monkeypatch.setattr(cli, "usable_cores", lambda: 4)
    monkeypatch.setattr(cli, "busy_cores", lambda: 0.0)
    monkeypatch.setattr(cli, "threadpoolctl_installed", lambda: True)
    chosen = cli._threads("auto", WORKLOADS)
    assert {k: c.count for k, c in chosen.items() if c.count != 1} == {
        f"train/fifty-time-steps-batch-{b}": 4 for b in (32, 64, 256)}
    assert chosen["text/char-model-80x80-batch-32"].count == 1  # the main job, as train-text
    line = cli.threads_summary("auto", chosen)
    assert line.startswith("--threads auto, train-text's rule for each row's time loop: 1 for "
                           "every row but: 4 for train/fifty-time-steps-batch-32, ")
    assert line.endswith("; where a row's threads leave a core free, dualtape's weight "
                         "gradients take it (overlap_gradients); --threads N or unset overrides")
    assert {k for k, c in chosen.items() if not c.overlap} == {
        f"train/fifty-time-steps-batch-{b}" for b in (32, 64, 256)}  # 4 of 4 cores taken
    assert cli.jax_limit(chosen) is None and cli.jax_limit({"a": chosen["lstm/forwards-60"]}) == 1
    monkeypatch.setattr(cli, "busy_cores", lambda: 3.0)  # three cores busy: one is left
    assert cli._threads("auto", WORKLOADS)["train/fifty-time-steps-batch-256"].count == 1
    assert {c.count for c in cli._threads("unset", WORKLOADS).values()} == {None}
    assert {c.count for c in cli._threads("3", WORKLOADS).values()} == {3}


def test_each_row_runs_under_the_threads_chosen_for_it(monkeypatch, capsys):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    seen = []

    def measure(workload, *args):
        seen.append({p["internal_api"]: p["num_threads"]
                     for p in threadpoolctl.threadpool_info()}.get("openblas"))
        return []

    monkeypatch.setattr(cli, "measure_workload", measure)
    monkeypatch.setattr(cli, "usable_cores", lambda: 2)
    monkeypatch.setattr(cli, "busy_cores", lambda: 0.0)
    status, _ = bench(capsys, "--backends", "numpy", "--references", "none", "--workloads",
                      "lstm/forwards-60,train/fifty-time-steps-batch-32")
    assert status == 0 and seen == [1, 2]  # auto: the small row on one, batch 32 x 512 on two


def test_the_header_names_the_cpus_family_model_and_vector_width(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
                    "model name\t: Intel(R) Xeon(R) Platinum 8481C\nflags\t\t: fpu sse2 avx "
                    "avx2 avx512f\n\nprocessor\t: 1\nmodel name\t: another\n")
    assert report.cpu_model(str(info)) == ("Intel(R) Xeon(R) Platinum 8481C (family 6, "
                                           "model 143, AVX-512)")
    info.write_text("model name\t: AMD EPYC\nflags\t\t: fpu avx avx2\n")
    assert report.cpu_model(str(info)) == "AMD EPYC (AVX2)"
    assert report.cpu_model(str(tmp_path / "missing")) != ""


@pytest.mark.parametrize("inner", [1, 3], ids=["one-row-outer", "product"])
def test_the_bounds_products_are_the_products(inner):
    """The bound times ``a b`` (at inner size 1 as an outer product, which numpy's matmul
    computes several times slower): the same products either way."""
    import numpy as np

    from dualtape.benchmarks.bound import _product

    rng = np.random.default_rng(0)
    a, b, out = rng.standard_normal((4, inner)), rng.standard_normal((inner, 5)), np.empty((4, 5))
    _product(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-14)


def test_the_bound_runs_the_loops_products_compiled_where_they_run(monkeypatch):
    """Per layer, the per-step products are one compiled call (``recurrent_products``) where
    the compiled loops run: the bound then counts no interpreter time between steps."""
    from dualtape.benchmarks import bound
    from dualtape.benchmarks.workloads import WORKLOADS
    from dualtape.kernels import numba_lstm

    if numba_lstm.unavailable() is not None:
        pytest.skip(numba_lstm.unavailable())
    made = []
    real = numba_lstm.recurrent_products

    def counted(U, steps, batch):
        made.append((U.shape, steps, batch))
        return real(U, steps, batch)

    monkeypatch.setattr(numba_lstm, "recurrent_products", counted)
    workload = next(w for w in WORKLOADS if w.key == "train/tiny-4-8-4-fifty-time-steps")
    bound.BoundRunner().prepare(workload, "float32")()
    assert made == [((24, 8), 50, 1), ((12, 4), 50, 1)]


def test_the_bound_at_one_row_updates_in_place(monkeypatch):
    """At T = 1 and batch 1 the bound times each layer's rank-1 updates in place (the fused
    step's kernel, at rate 0), not outer products written out: the least any implementation
    does there."""
    from dualtape.benchmarks import bound
    from dualtape.benchmarks.workloads import WORKLOADS
    from dualtape.kernels import numba_descent, numba_lstm

    if numba_lstm.unavailable() is not None:
        pytest.skip(numba_lstm.unavailable())
    moved = []
    real = numba_descent.descend

    def counted(W, U, b, xs, cells, blocks, dxs, rate):
        moved.append((W.shape, dxs is not None, rate))
        return real(W, U, b, xs, cells, blocks, dxs, rate)

    monkeypatch.setattr(numba_descent, "descend", counted)
    workload = next(w for w in WORKLOADS if w.key == "train/one-time-step")
    bound.BoundRunner().prepare(workload, "float32")()
    assert moved == [((2048, 40), False, 0.0), ((160, 512), True, 0.0)]
