"""Every option of ``dualtape bench`` with a bad value is one line and exit status 1, before
anything is timed; a backend that cannot run here beside one that can is a note."""

from __future__ import annotations

import errno
import os
import sys

import pytest

from dualtape import files
from dualtape.backend import BackendUnavailable, resolve_backend
from dualtape.cli import main

from .test_benchmark_cli import bench, refusal

TINY = ("--backends", "numpy", "--references", "none", "--workloads", "update/matrix-60x60")


def torch_without_cuda() -> None:
    """Skip unless torch is installed and cannot use CUDA here."""
    pytest.importorskip("torch", reason="torch is not installed")
    try:
        resolve_backend("torch", "cuda")
    except BackendUnavailable:
        return
    pytest.skip("torch works on CUDA here")


THREADS_WORDS = "--threads must be auto, unset or a whole number of threads, 1 or more, got"


@pytest.mark.parametrize(("options", "says"), [
    (["--threads", "0"], f"{THREADS_WORDS} 0"),
    (["--threads", "-2"], f"{THREADS_WORDS} -2"),
    (["--threads", "two"], f"{THREADS_WORDS} two"),
    (["--workloads", ","], "--workloads needs at least one name"),
    (["--workloads", ""], "--workloads needs at least one name"),
    (["--workloads", "lstm,lstm"], "--workloads names lstm more than once"),
    (["--workloads", "lstm/forwards-60,nope"], "unknown workloads ['nope']"),
    (["--workloads", "fifty-time-steps-batch-256"], "--quick leaves none of these workloads"),
    (["--dtypes", "float16"], "--dtypes takes float32, float64, got float16"),
    (["--dtypes", ","], "--dtypes needs at least one name"),
    (["--dtypes", "float64, float64"], "--dtypes names float64 more than once"),
    (["--backends", ","], "--backends needs at least one name"),
    (["--backends", "numpy, numpy"], "--backends names numpy more than once"),
    (["--backends", "numpy:gpu"], "backend 'numpy' has only the device 'cpu'"),
    (["--backends", "numpy,jax"], "unknown backend 'jax'"),
    (["--references", ""], "--references needs at least one name"),
    (["--references", "naive,naive"], "--references names naive more than once"),
    (["--references", "none,naive"], "unknown references ['none']"),
    (["--references", "naive,nope"], "unknown references ['nope']"),
], ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_a_bad_option_is_refused_in_one_line(capsys, options, says):
    assert says in refusal(capsys, *TINY, *options)  # TINY first: `options` override it


def test_one_backend_written_two_ways_is_refused(capsys):
    pytest.importorskip("torch", reason="torch is not installed")
    line = refusal(capsys, "--backends", "torch,torch:cpu")
    assert "--backends torch and torch:cpu are the same backend and device" in line


def test_a_malformed_torch_device_is_refused(capsys):
    pytest.importorskip("torch", reason="torch is not installed")
    assert "backend 'torch': 'cuda:x' is not a device" in refusal(capsys, "--backends",
                                                                  "numpy,torch:cuda:x")


@pytest.mark.parametrize("device", ["cuda", "0"])
def test_torch_on_cuda_without_cuda_is_a_note_beside_numpy_and_a_refusal_alone(capsys, device):
    torch_without_cuda()
    line = refusal(capsys, "--backends", f"torch:{device}")
    assert f"none of the requested backends can run here: torch:{device}: backend 'torch'" in line
    status, out = bench(capsys, "--backends", f"numpy,torch:{device}", *TINY[2:])
    assert status == 0
    assert f"note: skipped backend torch:{device}: backend 'torch' device 'cuda" in out
    assert "| update/matrix-60x60 | numpy | float64 |" in out


def test_spaces_around_names_are_ignored(capsys):
    status, out = bench(capsys, "--backends", " numpy ", "--references", " none",
                        "--workloads", " update/matrix-60x60 ,")
    assert status == 0 and "| update/matrix-60x60 | numpy | float64 |" in out


def test_a_workload_is_found_by_its_bare_name(capsys):
    status, out = bench(capsys, *TINY[:4], "--workloads", "matrix-60x60")
    assert status == 0 and "| update/matrix-60x60 | numpy | float64 |" in out


def test_array_api_strict_is_timed_only_when_asked_for(capsys):
    status, out = bench(capsys, "--references", "none", "--workloads", "update/matrix-60x60")
    assert status == 0 and "array_api_strict" not in out


def test_a_thread_limit_without_threadpoolctl_is_refused_before_any_note(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)
    monkeypatch.setitem(sys.modules, "cupy", None)  # so that --backends cupy gives a note
    line = refusal(capsys, "--threads", "1", *TINY, "--backends", "numpy,cupy")
    assert "--threads needs threadpoolctl" in line


def test_a_plot_without_matplotlib_is_refused(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    line = refusal(capsys, "--plot", str(tmp_path / "p.png"), *TINY)
    assert "--plot needs matplotlib" in line


# --- output files, checked before anything is timed -----------------------------------------


def _fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    return tmp_path / "fifo"


def _read_only(tmp_path):
    (tmp_path / "old.json").write_text("old")
    (tmp_path / "old.json").chmod(0o444)
    return tmp_path / "old.json"


def _link_to_fifo(tmp_path):
    (tmp_path / "link").symlink_to(_fifo(tmp_path))
    return tmp_path / "link"


@pytest.mark.parametrize(("make", "says"), [
    (lambda tmp: "", "--json needs a file name"),
    (lambda tmp: tmp / "missing" / "r.json", "its folder does not exist"),
    (lambda tmp: tmp, "it is a folder"),
    (lambda tmp: f"{tmp}/new/", "names a folder, not a file"),
    (_read_only, "the file is read-only"),
    (_fifo, "not a regular file"),
    (_link_to_fifo, "not a regular file"),
    (lambda tmp: os.devnull, "not a regular file"),
], ids=["empty", "no folder", "a folder", "trailing slash", "read-only", "fifo", "link to fifo",
        "device"])
def test_an_output_that_cannot_be_written_is_refused_before_timing(capsys, tmp_path, make,
                                                                    says):
    path = str(make(tmp_path))
    line = refusal(capsys, "--json", path, *TINY)
    assert line.startswith(f"dualtape bench: --json {path}") and says in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["fifo"], ["fifo", "link"],
                                                          ["old.json"])


def test_a_folder_that_takes_no_new_file_is_refused(capsys, tmp_path, monkeypatch):
    def read_only_file_system(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(files.tempfile, "TemporaryFile", read_only_file_system)
    line = refusal(capsys, "--markdown", str(tmp_path / "r.md"), *TINY)
    assert line.endswith(f"--markdown {tmp_path / 'r.md'}: Read-only file system")


def test_two_options_naming_one_file_are_refused(capsys, tmp_path):
    (tmp_path / "link.md").symlink_to(tmp_path / "r.md")
    line = refusal(capsys, "--json", str(tmp_path / "r.md"), "--markdown",
                   str(tmp_path / "link.md"), *TINY)
    assert "--json and --markdown name the same file" in line


@pytest.mark.parametrize("name", ["r.xyz", "r"])
def test_a_plot_format_matplotlib_does_not_write_is_refused(capsys, tmp_path, name):
    pytest.importorskip("matplotlib")
    line = refusal(capsys, "--plot", str(tmp_path / name), *TINY)
    assert "the name must end in a format matplotlib writes: " in line and ".png" in line


def test_nothing_is_timed_before_the_checks(capsys, tmp_path, monkeypatch):
    from dualtape.benchmarks import cli

    def timed(*args, **kwargs):
        raise AssertionError("timed before the checks")

    monkeypatch.setattr(cli, "measure_workload", timed)
    refusal(capsys, "--json", str(tmp_path / "missing" / "r.json"), *TINY)
    refusal(capsys, "--threads", "0", *TINY)


def test_ctrl_c_while_timing_exits_130_and_writes_nothing(capsys, tmp_path, monkeypatch):
    from dualtape.benchmarks import cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "measure_workload", interrupted)
    assert main(["bench", "--quick", "--json", str(tmp_path / "r.json"), *TINY]) == 130
    assert capsys.readouterr().err.endswith("dualtape bench: interrupted\n")
    assert list(tmp_path.iterdir()) == []
