"""Which route a recurrent training call takes, on the record (``routes``, ``route_choice``):
``dualtape.route`` foresees it without training, ``dualtape.last_route`` says what ran, and
``DUALTAPE_TRACE`` prints each new choice."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.kernels import cpu_path

from .helpers import host_params


def fast_here(backend) -> bool:
    return backend.name == "numpy" and cpu_path()[0] == "compiled"


def lstms(top=False, dtype="float64"):
    layers = [dualtape.LSTM(3, 4, seed=1, dtype=dtype), dualtape.LSTM(4, 3, seed=2, dtype=dtype)]
    if top:
        layers.append(dualtape.FullyConnected(3, 3, seed=3, dtype=dtype))
    return dualtape.RecurrentNetwork(layers)


def data(steps=5, batch=2):
    rng = np.random.default_rng(7)
    return tuple(dualtape.asarray(rng.uniform(-1, 1, (steps, batch, 3))) for _ in "xt")


CASES = {  # the call's arguments, its route where the compiled loops run, and why the
    # whole step and the planned pass declined ("": taken or not tried)
    "defaults": ({}, "whole-step", "", ""),
    "state": ({"state": [None, None]}, "whole-step", "", ""),
    "mask": ({"mask": np.ones((5, 2))}, "whole-step", "", ""),
    "fortran": ({"fortran": True}, "whole-step", "", ""),
    "one-sequence": ({"single": True}, "whole-step", "", ""),
    "sqrt-tape": ({"tape": "sqrt"}, "planned", "a checkpointed tape", ""),
    "momentum": ({"optimizer": lambda: dualtape.SGD(0.1, momentum=0.5)}, "planned",
                 "SGD with momentum", ""),
    "adam": ({"optimizer": dualtape.Adam}, "planned", "Adam is not SGD itself", ""),
    "adam-mask": ({"optimizer": dualtape.Adam, "mask": np.ones((5, 2))}, "planned",
                  "Adam is not SGD itself", ""),
    "adam-state": ({"optimizer": dualtape.Adam, "state": [None, None]}, "planned",
                   "Adam is not SGD itself", ""),
    "adam-sqrt": ({"optimizer": dualtape.Adam, "tape": "sqrt"}, "planned",
                  "Adam is not SGD itself", ""),
    "top": ({"top": True}, "planned", "a FullyConnected on top", ""),
}


@pytest.mark.parametrize("case", list(CASES))
def test_route_foresees_the_route_train_recurrent_takes(backend, case):
    """``route`` says, without training, the route and reasons the call then records; each
    faster route names why it declined."""
    options, taken, whole, planned = CASES[case]
    options = dict(options)
    net = lstms(options.pop("top", False))
    optimizer = options.pop("optimizer", lambda: dualtape.SGD(0.1))()
    xs, targets = data(batch=1 if options.get("single") else 2)
    if options.pop("fortran", False) and backend.name == "numpy":  # prepared anew: C order
        xs = np.asfortranarray(xs)
    if options.pop("single", False):  # prepared anew: with a batch axis
        xs, targets = xs[:, 0, ...], targets[:, 0, ...]
    if "mask" in options:
        options["mask"] = dualtape.asarray(options["mask"])
    before = host_params(net)
    foreseen = dualtape.route(net, xs, targets, optimizer=optimizer, **options)
    assert all(np.array_equal(b[k], a[k]) for b, a in zip(before, host_params(net), strict=True)
               for k in b)
    assert dualtape.last_route(net, "train_recurrent") is None
    dualtape.train_recurrent(net, xs, targets, optimizer, **options)
    took = dualtape.last_route(net, "train_recurrent")
    assert took == foreseen and took.verb == "train_recurrent"
    if fast_here(backend):
        reasons = dict(took.declined)
        assert took.taken == taken and reasons.get("whole-step", "") == whole
        assert reasons.get("planned", "") == planned and took.loops == "compiled"
    else:
        assert took.taken == "layers" and "whole-step" in dict(took.declined)


def test_a_call_the_whole_step_gives_back_records_no_whole_step(backend):
    """A NaN input: the whole step hands the call to the layers, which refuse it; nothing ran
    to the end, so nothing is on the record (a whole step least of all)."""
    net, (xs, targets) = lstms(), data()
    xs = dualtape.asarray(np.where(np.arange(30).reshape(5, 2, 3) == 4, np.nan, 0.5))
    with pytest.raises(FloatingPointError):
        dualtape.train_recurrent(net, xs, targets, dualtape.SGD(0.1))
    assert dualtape.last_route(net, "train_recurrent") is None


def test_backpropagate_sequence_is_planned_or_says_why(backend):
    net, (xs, targets) = lstms(top=True), data()
    mask = dualtape.asarray(np.ones((5, 2)))
    for options, planned, why in [({}, True, None), ({"mask": mask}, True, None),
                                  ({"state": [None, None]}, True, None),
                                  ({"need_dstate": True}, False, "need_dstate=True")]:
        foreseen = dualtape.route(net, xs, targets, verb="backpropagate_sequence", **options)
        dualtape.backpropagate_sequence(net, xs, targets, **options)
        took = dualtape.last_route(net, "backpropagate_sequence")
        assert took == foreseen
        if fast_here(backend):
            assert (took.taken == "planned") == planned
            assert dict(took.declined).get("planned") == why


def test_route_calls_no_loss_and_moves_nothing(backend):
    def loss(xp, ys, targets):
        raise AssertionError("route called the loss")

    net, (xs, targets) = lstms(), data()
    before = host_params(net)
    for verb in ("train_recurrent", "backpropagate_sequence"):
        dualtape.route(net, xs, targets, verb=verb, optimizer=dualtape.SGD(0.1), loss=loss)
    assert all(np.array_equal(b[k], a[k]) for b, a in zip(before, host_params(net), strict=True)
               for k in b)


def test_the_ufunc_loop_says_why_not_the_compiled_one(monkeypatch):
    monkeypatch.setenv("DUALTAPE_JIT", "0")
    net, (xs, targets) = lstms(), data()
    dualtape.train_recurrent(net, np.asarray(xs), np.asarray(targets), dualtape.Adam())
    took = dualtape.last_route(net, "train_recurrent")
    assert took.loops == "ufuncs" and "DUALTAPE_JIT=0" in dict(took.declined)["compiled loops"]
    assert str(took).startswith("train_recurrent: layers, ufuncs loops (declined whole-step: ")


@pytest.mark.parametrize(("verb", "net", "error", "message"), [
    ("train", "recurrent", ValueError, "verb must be one of train_recurrent"),
    ("train_recurrent", "feed-forward", TypeError, "expected a RecurrentNetwork"),
    ("train_recurrent", "recurrent", TypeError, "needs its optimizer")])
def test_route_refuses_what_it_cannot_answer(verb, net, error, message):
    model = lstms() if net == "recurrent" else dualtape.Network([dualtape.Tanh()])
    xs, targets = data()
    with pytest.raises(error, match=message):
        dualtape.route(model, xs, targets, verb=verb)


def test_the_trace_prints_each_new_choice_once(monkeypatch, capsys):
    monkeypatch.setenv("DUALTAPE_TRACE", "1")
    net, (xs, targets) = lstms(), data()
    for _ in range(3):
        dualtape.train_recurrent(net, xs, targets, dualtape.Adam())
    dualtape.backpropagate_sequence(net, xs, targets, need_dstate=True)
    dualtape.backpropagate_sequence(net, xs, targets, need_dstate=True)
    dualtape.train_recurrent(net, xs, targets, dualtape.SGD(0.1, momentum=0.5))
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(":")[1] for line in lines] == [
        " train_recurrent", " backpropagate_sequence", " train_recurrent"]
    assert all(line.startswith("dualtape route: ") for line in lines)
    assert "SGD with momentum" in lines[-1] and "need_dstate=True" in lines[1]


def test_no_trace_unless_asked(monkeypatch, capsys):
    monkeypatch.setenv("DUALTAPE_TRACE", "off")
    net, (xs, targets) = lstms(), data()
    dualtape.train_recurrent(net, xs, targets, dualtape.Adam())
    assert capsys.readouterr().err == ""


def test_a_bad_trace_value_is_refused_in_one_line_naming_it(monkeypatch):
    monkeypatch.setenv("DUALTAPE_TRACE", "loud")
    net, (xs, targets) = lstms(), data()
    before = host_params(net)
    with pytest.raises(ValueError, match=r"^environment variable DUALTAPE_TRACE='loud': use "):
        dualtape.train_recurrent(net, xs, targets, dualtape.Adam())
    assert all(np.array_equal(b[k], a[k]) for b, a in zip(before, host_params(net), strict=True)
               for k in b)


@pytest.mark.parametrize(("case", "declined"), [
    ("one-row", (("whole-step", "Adam is not SGD itself"), ("planned", "one row (T x B = 1)"))),
    ("ids", (("whole-step", "ids for input"),))])
def test_the_planned_passs_own_declines_are_said_in_their_words(backend, case, declined):
    """Adam over one row (the gradients' kernel makes no gemv bits) takes the layers; plain
    SGD with ids for input takes the planned pass's gradients, then its step."""
    net = lstms()
    if case == "one-row":
        (xs, targets), optimizer = data(1, 1), dualtape.Adam()
    else:
        rng = np.random.default_rng(3)
        xs, targets = dualtape.asarray(rng.integers(0, 3, (5, 2))), data()[1]
        optimizer = dualtape.SGD(0.1)
    took = dualtape.route(net, xs, targets, optimizer=optimizer)
    if fast_here(backend):
        assert took.declined[:len(declined)] == declined
        assert took.taken == ("layers" if case == "one-row" else "planned")


@pytest.mark.parametrize("jit", ["1", "0"])
def test_info_names_the_main_jobs_route(monkeypatch, capsys, jit):
    from dualtape import cli

    monkeypatch.setenv("DUALTAPE_JIT", jit)
    assert cli.main(["info"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith("train-text's step on numpy: "))
    if jit == "0":
        assert line.endswith("layers, ufuncs loops (declined planned: DUALTAPE_JIT=0 asks for "
                             "the ufunc loop; compiled loops: DUALTAPE_JIT=0 asks for the ufunc "
                             "loop)")
    elif cpu_path()[0] == "compiled":
        assert line.endswith(": planned, compiled loops")


LEARN = "learn_initial_state=True"
WHY = {  # the verb, its arguments, the reasons of the faster routes the layers' route gives
    "learn": ("train_recurrent", {"learn_initial_state": True},
              (("whole-step", LEARN), ("planned", LEARN))),
    "dstate": ("backpropagate_sequence", {"need_dstate": True},
               (("planned", "need_dstate=True"),)),
}


@pytest.mark.parametrize("case", list(WHY))
def test_each_decline_is_said_in_its_words_on_every_backend(backend, case):
    """The reasons that come before any backend's own (the call's arguments) are the same
    words everywhere; the layers run the compiled loops on numpy, the generic ones elsewhere
    (CuPy's are "cuda"), and the compiled loops taken add no reason."""
    verb, options, why = WHY[case]
    net, (xs, targets) = lstms(), data()
    options = {"optimizer": dualtape.SGD(0.1), **options}
    took = dualtape.route(net, xs, targets, verb=verb, **options)
    assert took.declined[:len(why)] == why
    if fast_here(backend):
        assert took == dualtape.Route(verb, "layers", "compiled", why)
    elif backend.name != "numpy":
        assert took.taken == "layers" and took.loops == "generic"


def test_a_networks_route_is_forgotten_with_it():
    """The record holds no network alive and forgets a network once it is gone (a new one at
    the same ``id`` starts with no route)."""
    import gc

    from dualtape import routes

    net, (xs, targets) = lstms(), data()
    dualtape.train_recurrent(net, np.asarray(xs), np.asarray(targets), dualtape.Adam())
    key = (id(net), "train_recurrent")
    assert key in routes._LAST
    del net
    gc.collect()
    assert key not in routes._LAST
