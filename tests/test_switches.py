"""``DUALTAPE_JIT`` and ``DUALTAPE_FUSED``: the usual spellings of off and on, an unknown value
refused in one line naming the variable, read at each call and once per held call; every
``dualtape`` subcommand refuses a bad value of them or of ``DUALTAPE_BACKEND`` before it runs."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import dualtape
from dualtape import cli, kernels, switches
from dualtape.switches import OFF, ON, check_switches, held, switched_on

OFF_SPELLINGS = [*OFF, "FALSE", " 0", "Off\n", "No"]
ON_SPELLINGS = [*ON, "TRUE", " 1 ", "Yes"]
UNKNOWN = ["2", "disable", "o", "0 0", "-1"]


@pytest.mark.parametrize("value", OFF_SPELLINGS)
def test_off_spellings_turn_the_switch_off(monkeypatch, value):
    monkeypatch.setenv("DUALTAPE_JIT", value)
    assert switched_on("DUALTAPE_JIT") is False


@pytest.mark.parametrize("value", ON_SPELLINGS)
def test_on_spellings_and_unset_leave_it_on(monkeypatch, value):
    monkeypatch.setenv("DUALTAPE_FUSED", value)
    assert switched_on("DUALTAPE_FUSED") is True
    monkeypatch.delenv("DUALTAPE_FUSED")
    assert switched_on("DUALTAPE_FUSED") is True


@pytest.mark.parametrize("value", UNKNOWN)
def test_an_unknown_value_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("DUALTAPE_JIT", value)
    with pytest.raises(ValueError, match=r"environment variable DUALTAPE_JIT=.*use one of 0"):
        switched_on("DUALTAPE_JIT")


@pytest.mark.parametrize("name", switches.SWITCHES)
def test_check_switches_names_the_bad_one_and_passes_the_good(monkeypatch, name):
    for other in switches.SWITCHES:
        monkeypatch.setenv(other, "off")
    check_switches()
    monkeypatch.setenv(name, "sometimes")
    with pytest.raises(ValueError, match=rf"^environment variable {name}='sometimes': use one"):
        check_switches()


COMMANDS = [["info"], ["bench", "--quick"], ["train-text", "--steps", "1"],
            ["sample", "model.npz"], ["tape", "model.npz"], ["plot", "run.log.csv"]]
BAD_ENVIRONMENT = [("DUALTAPE_JIT", "bogus", "use one of 0, false"),
                   ("DUALTAPE_FUSED", "2", "use one of 0, false"),
                   ("DUALTAPE_TRACE", "loud", "use one of 0, false"),
                   ("DUALTAPE_BACKEND", "bogus", "use one of auto, numpy, cupy"),
                   ("DUALTAPE_BACKEND", "NumPy", "use one of auto, numpy, cupy")]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
@pytest.mark.parametrize("name, value, advice", BAD_ENVIRONMENT)
def test_every_command_refuses_a_bad_environment_value_in_one_line(monkeypatch, capsys, argv,
                                                                   name, value, advice):
    """Refused before the command runs (nothing on stdout, no "the run failed" or exception
    name: the check, not a failure midway), one line naming the variable, status 1."""
    monkeypatch.setenv(name, value)
    assert cli.main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"dualtape {argv[0]}: error: environment variable {name}={value!r}: "
                          f"{advice}")
    assert err.count("\n") == 1 and err.endswith(", or leave it unset\n")


@pytest.mark.parametrize("value", ["", "auto", "numpy", "cupy", "torch", "array_api_strict"])
def test_a_backend_name_that_may_not_work_here_is_left_to_where_it_is_used(monkeypatch, value):
    monkeypatch.setenv("DUALTAPE_BACKEND", value)
    assert cli.environment_problem() is None


@pytest.mark.parametrize("value", ["off", "false", " 0", "no"])
def test_the_cpu_path_follows_every_spelling_of_off(monkeypatch, value):
    monkeypatch.setenv("DUALTAPE_FUSED", value)
    assert kernels.cpu_path()[0] == "generic"
    monkeypatch.setenv("DUALTAPE_FUSED", "on")
    monkeypatch.setenv("DUALTAPE_JIT", value)
    assert kernels.cpu_path()[0] == "ufuncs"


def test_an_unknown_value_stops_the_optimizer_before_any_update(monkeypatch):
    with dualtape.use_backend("numpy"):
        layer = dualtape.FullyConnected(2, 3, seed=0, dtype="float64")
    before = np.array(layer.params["W"])
    monkeypatch.setenv("DUALTAPE_FUSED", "maybe")
    grads = {k: np.ones_like(v) for k, v in layer.params.items()}
    with pytest.raises(ValueError, match="DUALTAPE_FUSED='maybe'"):
        dualtape.SGD(0.1).step([layer.params], [grads])
    np.testing.assert_array_equal(layer.params["W"], before)


def test_off_spelled_otherwise_takes_the_generic_optimizer(monkeypatch):
    """``DUALTAPE_FUSED=off`` puts a new array into the dict, as ``0`` does."""
    with dualtape.use_backend("numpy"):
        layer = dualtape.FullyConnected(2, 3, seed=0, dtype="float64")
    W = layer.params["W"]
    grads = {k: np.ones_like(v) for k, v in layer.params.items()}
    monkeypatch.setenv("DUALTAPE_FUSED", "off")
    dualtape.SGD(0.1).step([layer.params], [grads])
    assert layer.params["W"] is not W
    monkeypatch.setenv("DUALTAPE_FUSED", "yes")
    W = layer.params["W"]
    dualtape.SGD(0.1).step([layer.params], [grads])
    assert layer.params["W"] is W  # in place


def test_a_held_call_reads_each_switch_once_and_keeps_it(monkeypatch):
    seen = []

    @held
    def call():
        seen.append(switched_on("DUALTAPE_JIT"))
        monkeypatch.setenv("DUALTAPE_JIT", "0")  # changed mid-call: the call keeps its path
        seen.append(switched_on("DUALTAPE_JIT"))
        seen.append(inner())

    @held
    def inner():  # nested: shares the outer call's values
        return switched_on("DUALTAPE_JIT")

    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    call()
    assert seen == [True, True, True]
    assert switched_on("DUALTAPE_JIT") is False  # the values went with the call
    assert inner() is False


@pytest.mark.parametrize("environ", ["os", "plain-mapping"])
@pytest.mark.parametrize("name", switches.SWITCHES)
def test_a_held_call_sees_each_switch_as_the_environment_spells_it(monkeypatch, environ, name):
    """Unset, set and unset again, whether ``os.environ`` is its own mapping (read without a
    ``KeyError`` per unset name) or a stand-in a program put there."""
    if environ == "plain-mapping":
        monkeypatch.setattr(switches.os, "environ", dict(switches.os.environ))
    for other in switches.SWITCHES:
        monkeypatch.delenv(other, raising=False)
    read = held(lambda: {n: switched_on(n) for n in switches.SWITCHES})
    assert read() == dict.fromkeys(switches.SWITCHES, True)
    monkeypatch.setenv(name, "off")
    assert read() == {n: n != name for n in switches.SWITCHES}
    monkeypatch.delenv(name)
    assert read() == dict.fromkeys(switches.SWITCHES, True)


def test_a_held_call_that_raises_leaves_no_values_behind(monkeypatch):
    @held
    def call():
        switched_on("DUALTAPE_FUSED")
        raise RuntimeError("stop")

    monkeypatch.setenv("DUALTAPE_FUSED", "1")
    with pytest.raises(RuntimeError):
        call()
    monkeypatch.setenv("DUALTAPE_FUSED", "0")
    assert switched_on("DUALTAPE_FUSED") is False


def test_an_unknown_value_is_refused_inside_a_held_call_too(monkeypatch):
    monkeypatch.setenv("DUALTAPE_JIT", "maybe")
    with pytest.raises(ValueError, match="DUALTAPE_JIT='maybe'"):
        held(lambda: switched_on("DUALTAPE_JIT"))()


def test_a_held_call_holds_its_values_for_its_own_thread_alone(monkeypatch):
    monkeypatch.setenv("DUALTAPE_JIT", "1")
    other = []

    @held
    def call():
        switched_on("DUALTAPE_JIT")
        monkeypatch.setenv("DUALTAPE_JIT", "0")
        worker = threading.Thread(target=lambda: other.append(switched_on("DUALTAPE_JIT")))
        worker.start()
        worker.join()
        return switched_on("DUALTAPE_JIT")

    assert call() is True
    assert other == [False]


def test_one_training_call_reads_each_switch_once(backend, monkeypatch):
    """train_recurrent and the network's passes inside it: one environment read per switch,
    when the call begins, not one per layer and pass (each read costs about 2 us)."""
    reads = []
    real = switches._spelled
    monkeypatch.setattr(switches, "_spelled", lambda: reads.append(1) or real())
    net = dualtape.RecurrentNetwork([dualtape.LSTM(3, 4, seed=0, dtype="float64"),
                                     dualtape.LSTM(4, 2, seed=1, dtype="float64")])
    xp = backend.xp
    xs = xp.ones((5, 2, 3), dtype=xp.float64, device=backend.device)
    targets = xp.zeros((5, 2, 2), dtype=xp.float64, device=backend.device)
    dualtape.train_recurrent(net, xs, targets, dualtape.SGD(0.1))
    assert reads == [1]


def test_every_switch_the_package_reads_is_registered():
    """A held call keys its kept choices by ``SWITCHES``: a switch missing there would let a
    choice made under one value serve another (``switched_on`` would raise KeyError)."""
    import pathlib
    import re

    root = pathlib.Path(dualtape.__file__).parent
    read = {name for path in root.rglob("*.py")
            for name in re.findall(r'switched_on\("(\w+)"\)', path.read_text())}
    assert read and read <= set(switches.SWITCHES)


def test_a_held_choice_is_made_once_per_key_and_spelling_of_the_switches(monkeypatch):
    made = []

    def choose(key):
        return lambda: made.append(key) or f"path for {key}"

    @held
    def call():
        return [switches.held_choice(key, choose(key)) for key in ("a", "b", "a", "a", "b")]

    assert call() == ["path for a", "path for b", "path for a", "path for a", "path for b"]
    assert made == ["a", "b"]
    assert call() and made == ["a", "b"]  # kept for later calls under the same switches
    monkeypatch.setenv("DUALTAPE_JIT", "1")  # another spelling: chosen again, and kept
    assert call() and call() and made == ["a", "b", "a", "b"]
    assert switches.held_choice("a", choose("a")) == "path for a"  # outside one: every time
    assert switches.held_choice("a", choose("a")) and made[-2:] == ["a", "a"]


def test_training_calls_choose_each_lstm_path_once(backend, monkeypatch):
    """Two LSTMs forwards and back in one training call: one path choice for their dtype,
    not one per layer and pass; later calls under the same switches keep it, and one under
    another spelling of them chooses again."""
    chosen = []
    real = kernels._sequence_path
    monkeypatch.setattr(kernels, "_sequence_path",
                        lambda *args: chosen.append(args[1].dtype) or real(*args))
    net = dualtape.RecurrentNetwork([dualtape.LSTM(3, 4, seed=0), dualtape.LSTM(4, 2, seed=1)])
    xp = backend.xp
    xs = xp.ones((5, 2, 3), dtype=xp.float32, device=backend.device)
    targets = xp.zeros((5, 2, 2), dtype=xp.float32, device=backend.device)
    dualtape.train_recurrent(net, xs, targets, dualtape.SGD(0.1))
    assert chosen == [xp.float32]
    net.forward_sequence(None, xs)  # a call of its own, under the same switches
    assert chosen == [xp.float32]
    monkeypatch.setenv("DUALTAPE_FUSED", " on ")
    net.forward_sequence(None, xs)
    assert chosen == [xp.float32, xp.float32]
