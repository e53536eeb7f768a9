"""Compiling the CPU loops in a background process while the first steps run on the ufunc
loops (``kernels.compile_ahead``, train-text's use of it): the wait, the switch, a child that
fails or is killed, ``DUALTAPE_JIT=0`` left alone. The children here are fakes that wait for
a gate file, so nothing depends on timing."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from dualtape import cli, last_route, switches
from dualtape.kernels import compile_ahead, cpu_path
from dualtape.text import rehearse
from dualtape.text.trainer import TextTrainer


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    """Each test with the compiled loops running and nothing waiting for a compile (and so
    afterwards); skipped where the compiled loops do not run."""
    monkeypatch.setattr(compile_ahead, "_WAITING", None)
    path, why = cpu_path()
    if path != "compiled":
        pytest.skip(f"the compiled loops do not run here: {why}")


def gated(gate: Path, status: int = 0) -> list[str]:
    """A child that waits for the file ``gate``, writes a line to stderr and exits ``status``."""
    code = (f"import os, sys, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
            f"print('first line\\nlast line', file=sys.stderr); sys.exit({status})")
    return [sys.executable, "-c", code]


def ended(child: compile_ahead.Background, gate: Path) -> None:
    gate.touch()
    child.process.wait(timeout=60)


def test_the_ufunc_loops_run_until_the_child_succeeds_then_the_compiled_ones(tmp_path):
    child = compile_ahead.Background(gated(tmp_path / "gate"))
    choose = switches.held(cpu_path)  # a choice kept across held calls, as training makes
    assert choose() == ("ufuncs", "the compiled loops are compiling in a background process "
                        f"(pid {child.process.pid}) into numba's disk cache")
    assert child.poll() is None
    ended(child, tmp_path / "gate")
    assert choose()[0] == "ufuncs"  # not polled yet: the kept choice holds
    assert "the compiled CPU loops are ready" in child.poll()
    assert choose() == ("compiled", None)
    assert child.poll() is None and child.leave() is None  # said once


@pytest.mark.parametrize("status", [3, -signal.SIGKILL])
def test_a_child_that_fails_or_is_killed_leaves_the_ufunc_loops(tmp_path, status):
    child = compile_ahead.Background(gated(tmp_path / "gate", max(status, 0)))
    if status < 0:
        os.kill(child.process.pid, -status)
        child.process.wait(timeout=60)
    else:
        ended(child, tmp_path / "gate")
    why = "exit status 3: last line" if status > 0 else "ended by SIGKILL"
    assert child.poll() == f"the background compile failed ({why}); the run keeps the ufunc loops"
    assert switches.held(cpu_path)() == ("ufuncs", f"the background compile failed ({why})")
    assert child.poll() is None


def test_a_child_still_compiling_at_the_end_goes_on(tmp_path):
    child = compile_ahead.Background(gated(tmp_path / "gate"))
    assert child.leave() == (f"the background compile (pid {child.process.pid}) goes on "
                             "filling numba's disk cache: the next run starts on the compiled "
                             "loops")
    ended(child, tmp_path / "gate")
    assert child.leave() is None and child.process.returncode == 0  # reaped


def test_dualtape_jit_0_still_selects_the_ufunc_loop_for_its_own_reason(tmp_path, monkeypatch):
    child = compile_ahead.Background(gated(tmp_path / "gate"))
    monkeypatch.setenv("DUALTAPE_JIT", "0")
    assert cpu_path() == ("ufuncs", "DUALTAPE_JIT=0 asks for the ufunc loop")
    ended(child, tmp_path / "gate")
    child.poll()
    assert cpu_path() == ("ufuncs", "DUALTAPE_JIT=0 asks for the ufunc loop")


TRAIN = ["train-text", "--hidden", "8", "--seq-len", "8", "--batch", "2", "--steps", "4",
         "--sample-every", "0", "--sample-chars", "0", "--valid", "0", "--no-log",
         "--threads", "1"]


def train(monkeypatch, capsys, gate: Path | None = None) -> tuple[str, list[str]]:
    """train-text's output and each step's loops, where numba's disk cache holds none; the
    fake child (``gate``) ends after step 2 (None: a real rehearsal must not start)."""
    monkeypatch.setattr(compile_ahead, "cached", lambda module, dtype: False)
    monkeypatch.setattr(rehearse, "command", lambda *args: gated(gate) if gate else 1 / 0)
    children, loops = [], []
    start, step = compile_ahead.Background.__init__, TextTrainer.step

    def recorded(self, *args):
        start(self, *args)
        children.append(self)

    def stepped(self):
        step(self)
        loops.append(last_route(self._logits, "backpropagate_sequence").loops)
        if gate and self.step_count == 2:
            ended(children[0], gate)

    monkeypatch.setattr(compile_ahead.Background, "__init__", recorded)
    monkeypatch.setattr(TextTrainer, "step", stepped)
    assert cli.main(TRAIN) == 0
    return capsys.readouterr().out, loops


def test_train_text_switches_to_the_compiled_loops_between_steps(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DUALTAPE_BACKGROUND_COMPILE", raising=False)
    out, loops = train(monkeypatch, capsys, tmp_path / "gate")
    assert "they compile in a background process (pid " in out
    assert "DUALTAPE_BACKGROUND_COMPILE=0 waits for the compiler instead" in out
    assert "step 3: the compiled CPU loops are ready" in out
    assert "ufuncs loops (declined planned: the compiled loops are compiling in a background " \
        "process (pid " in out  # the header's route
    assert loops == ["ufuncs", "ufuncs", "compiled", "compiled"]


@pytest.mark.parametrize("env", [{"DUALTAPE_BACKGROUND_COMPILE": "0"}, {"DUALTAPE_JIT": "0"}])
def test_train_text_starts_no_child_when_told_to_wait_or_without_the_compiled_loops(
        monkeypatch, capsys, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out, loops = train(monkeypatch, capsys)
    assert "background" not in out
    assert loops == ["ufuncs" if "DUALTAPE_JIT" in env else "compiled"] * 4


@pytest.mark.parametrize("options", [
    {}, {"cell": "GRU", "optimizer": "adam", "stateful": True, "valid": 0.1},
    {"cell": "StandardLSTM", "hidden": [8, 8], "dropout": 0.5, "dtype": "float64"}])
def test_the_child_rehearses_the_run_and_marks_the_cells_loops(monkeypatch, options):
    """``python -m dualtape.text.rehearse SPEC`` (here in this process) of a run's trainer."""
    from dualtape.backend import resolve_backend
    from dualtape.text.config import TrainConfig

    config = TrainConfig(**{"hidden": [8], "seq_len": 8, "batch": 2, **options})
    trainer = TextTrainer.new("the quick brown fox jumps over the lazy dog " * 40, config,
                              resolve_backend("numpy"))
    marked = []
    monkeypatch.setattr(compile_ahead, "mark", lambda *where: marked.append(where))
    argv = rehearse.command(trainer, 1, False)
    assert argv[:3] == [sys.executable, "-m", "dualtape.text.rehearse"]
    assert rehearse.main(argv[3:]) == 0
    assert marked == [(rehearse.CELL_MODULES[config.cell], config.dtype)]


def test_a_rehearsal_that_fails_says_why_in_one_line(capsys):
    assert rehearse.main(["{}"]) == 1
    assert capsys.readouterr().err == "rehearsal failed: KeyError: 'config'\n"


def test_a_mark_is_found_by_the_same_module_and_dtype_only():
    module, dtype = "_numba_flush", f"test-{os.getpid()}"
    assert compile_ahead.cached(module, dtype) is False
    compile_ahead.mark(module, dtype)
    try:
        assert compile_ahead.cached(module, dtype) is True
        assert compile_ahead.cached(module, dtype + "x") is False
    finally:
        os.remove(compile_ahead._mark_path(module, dtype))


def test_train_text_waits_for_the_compiler_when_no_child_starts(monkeypatch, capsys):
    monkeypatch.delenv("DUALTAPE_BACKGROUND_COMPILE", raising=False)
    monkeypatch.setattr(compile_ahead, "cached", lambda module, dtype: False)
    monkeypatch.setattr(rehearse, "command", lambda *args: ["/nonexistent/python"])
    assert cli.main(TRAIN) == 0
    assert "background" not in capsys.readouterr().out


def test_a_run_after_the_background_compile_compiles_nothing(tmp_path, monkeypatch):
    """On an empty disk cache (fresh processes): the first run starts the child and ends
    before it; once the child marked the cell's loops, the same run compiles nothing."""
    from tests.test_numba_cache import compiles

    monkeypatch.delenv("DUALTAPE_BACKGROUND_COMPILE")
    cache = tmp_path / "cache"
    run = ["train-text", "--steps", "4", "--hidden", "8,8", "--seq-len", "4", "--batch", "2",
           "--valid-every", "1", "--sample-every", "1", "--sample-chars", "4", "--no-log",
           "--threads", "1"]  # as in test_a_second_identical_run_compiles_nothing
    assert compiles(cache, tmp_path, *run).startswith("compiled 3 in ")  # the flush's
    for _ in range(3000):  # the child's mark, after every compile (or a failure's timeout)
        if any(cache.rglob("_numba_lstm.float32.*.ready")):
            break
        time.sleep(0.1)
    assert compiles(cache, tmp_path, *run).startswith("compiled 0 in ")


def test_a_distributed_run_starts_no_child(monkeypatch, tmp_path):
    """Under ``--distributed`` every rank would start one, compiling the same loops."""
    from dualtape.backend import resolve_backend
    from dualtape.text import cli as text_cli
    from dualtape.text.config import TrainConfig
    from dualtape.text.threads import ThreadChoice

    monkeypatch.delenv("DUALTAPE_BACKGROUND_COMPILE")
    monkeypatch.setattr(compile_ahead, "cached", lambda module, dtype: False)
    monkeypatch.setattr(rehearse, "command", lambda *args: gated(tmp_path / "gate"))
    trainer = TextTrainer.new("some text " * 20, TrainConfig(hidden=[4], seq_len=4, batch=1),
                              resolve_backend("numpy"))
    assert text_cli._compile_ahead(trainer, ThreadChoice(1, ""), True) is None
    child, line = text_cli._compile_ahead(trainer, ThreadChoice(1, ""), False)
    ended(child, tmp_path / "gate")
    assert child.poll().startswith("the compiled CPU loops are ready")
