"""``dualtape tape`` in this process on tiny networks, the report itself replaced by a spy where
only what the command asks of it matters: each refusal's exact line, what the file's training
call gives and what the options override, the memory check's words, and the plot's bars
(``test_tape_report.py`` runs the real report on real networks)."""

from __future__ import annotations

import argparse
import struct

import pytest

import dualtape as dt
from dualtape import tape_command
from dualtape.cli import main
from dualtape.tape_command import TrainingCall
from dualtape.tape_memory import ProbeNeed


def lstm() -> dt.RecurrentNetwork:
    return dt.RecurrentNetwork([dt.LSTM(3, 4, seed=1)])


def dense() -> dt.Network:
    return dt.Network([dt.FullyConnected(3, 2, seed=1)])


class Spy:
    """Stands in for ``tape_report``: keeps what it was asked, answers ``REPORT``."""

    def __init__(self) -> None:
        self.asked: list[tuple] = []

    def __call__(self, net, shape, tape, optimizer, loss) -> str:
        self.asked.append((shape, tape, optimizer, loss))
        return "REPORT"


@pytest.fixture
def spy(monkeypatch) -> Spy:
    spy = Spy()
    monkeypatch.setattr(tape_command, "tape_report", spy)
    return spy


def tape(call: TrainingCall | Exception, *argv: str) -> int:
    """``dualtape tape FILE *argv`` whose file reads as ``call`` (or raises it)."""
    def read(path: str) -> TrainingCall:
        assert path == "FILE"
        if isinstance(call, Exception):
            raise call
        return call

    parser = argparse.ArgumentParser()
    tape_command.register(parser.add_subparsers(), read)
    args = parser.parse_args(["tape", "FILE", *argv])
    return args.run(args)


def refused(capsys, call, *argv: str) -> str:
    """The one error line of a refused ``tape(call, *argv)``, without its prefix."""
    assert tape(call, *argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("dualtape tape: error: ") and err.count("\n") == 1
    return err.removeprefix("dualtape tape: error: ").removesuffix("\n")


@pytest.mark.parametrize("argv, message", [
    (["--batch", "0"], "--batch must be an integer >= 1, got '0'"),
    (["--batch", "two"], "--batch must be an integer >= 1, got 'two'"),
    (["--seq-len", "-1"], "--seq-len must be an integer >= 1, got '-1'"),
    (["--shape", "3,0"], "--shape must be an integer >= 1, got '0'"),
    (["--tape", "0"], "--tape must be full, sqrt or an integer >= 1, got '0'"),
    (["--tape", "root"], "--tape must be full, sqrt or an integer >= 1, got 'root'"),
])
def test_a_bad_size_is_refused_before_the_file_is_read(capsys, spy, argv, message):
    assert refused(capsys, OSError("not read"), *argv) == message
    assert spy.asked == []


def test_sizes_of_one_are_taken(capsys, spy):
    assert tape(TrainingCall(lstm()), "--seq-len", "1", "--batch", "1", "--tape", "1") == 0
    assert spy.asked == [((1, 1, 3), 1, "sgd", None)]
    assert tape(TrainingCall(dt.Network([dt.Relu()])), "--shape", "1") == 0
    assert spy.asked[1] == ((1, 1), "sqrt", "sgd", None)


@pytest.mark.parametrize("problem, message", [
    (FileNotFoundError(2, "No such file or directory"),
     "cannot read FILE: No such file or directory"),
    (OSError("no reason given"), "cannot read FILE: no reason given"),
    (ValueError("FILE: not a dualtape file"), "FILE: not a dualtape file"),
])
def test_a_file_that_cannot_be_read(capsys, spy, problem, message):
    assert refused(capsys, problem, "--seq-len", "2") == message


def test_a_network_as_saved_is_read_on_numpy(tmp_path):
    pytest.importorskip("array_api_strict")
    path = tmp_path / "net.npz"
    dt.save(lstm(), path)
    with dt.use_backend("array_api_strict"):  # not where the report measures
        call = tape_command.read_network(str(path))
    assert call == TrainingCall(call.net) and call.net.backend.name == "numpy"


@pytest.mark.parametrize("call, argv, message", [
    (TrainingCall(lstm()), [], "FILE is a RecurrentNetwork: give --seq-len T"),
    (TrainingCall(dense()), ["--seq-len", "2"], "FILE is a Network (no sequence): drop --seq-len"),
    (TrainingCall(dt.Network([dt.Relu()])), [], "FILE: the network's input None has free axes; "
     "give one example's shape with --shape"),
    (TrainingCall(dt.Network([dt.Convolution(1, 2, (3, 3), seed=1)])), [],
     "FILE: the network's input (1, 'height', 'width') has free axes; give one example's "
     "shape with --shape"),
])
def test_what_the_network_needs_said(capsys, spy, call, argv, message):
    assert refused(capsys, call, *argv) == message


def test_the_files_call_is_measured_unless_an_option_says_otherwise(capsys, spy):
    call = TrainingCall(lstm(), ids=True, loss="softmax_cross_entropy", seq_len=5, batch=2,
                        optimizer="adam", note="NOTE")
    assert tape(call) == 0
    assert capsys.readouterr().out == "NOTE\nREPORT\n"
    assert tape(call, "--seq-len", "3", "--batch", "4", "--optimizer", "none", "--loss",
                "squared_error", "--tape", "full", "--shape", "3") == 0
    assert capsys.readouterr().out == "NOTE\nREPORT\n"
    assert tape(TrainingCall(lstm()), "--seq-len", "6") == 0
    assert capsys.readouterr().out == "REPORT\n"  # no note: nothing but the report
    assert spy.asked == [((5, 2), "sqrt", "adam", "softmax_cross_entropy"),
                         ((3, 4, 3), "full", "none", "squared_error"),
                         ((6, 1, 3), "sqrt", "sgd", None)]


def test_a_network_is_measured_at_its_batch_with_a_sqrt_tape(spy, monkeypatch):
    asked = []

    def need(net, shape, policy):
        asked.append((shape, policy))
        return ProbeNeed(1, None)

    monkeypatch.setattr(tape_command, "least_bytes", need)
    monkeypatch.setattr(tape_command, "probe_bytes", need)
    assert tape(TrainingCall(dense(), batch=7), "--tape", "4") == 0
    assert tape(TrainingCall(lstm(), seq_len=9), "--tape", "4") == 0
    assert asked == [((7, 3), "full")] * 2 + [((9, 1, 3), 4)] * 2
    assert [a[:2] for a in spy.asked] == [((7, 3), "sqrt"), ((9, 1, 3), 4)]


@pytest.mark.parametrize("call, argv, smaller", [
    (TrainingCall(lstm()), ["--seq-len", "9"], "--seq-len, --batch or --tape"),
    (TrainingCall(lstm()), ["--seq-len", "9", "--shape", "3"],
     "--seq-len, --batch, --tape or --shape"),
    (TrainingCall(dense()), [], "--batch"),
    (TrainingCall(dense()), ["--shape", "3"], "--batch or --shape"),
])
def test_a_report_the_memory_cannot_hold_is_refused_naming_what_makes_it_smaller(
        capsys, spy, monkeypatch, call, argv, smaller):
    monkeypatch.setattr(tape_command, "free_memory", lambda backend: 3 * 2**30)
    monkeypatch.setattr(tape_command, "least_bytes", lambda *a: ProbeNeed(3 * 2**30 + 1, 1234))
    assert refused(capsys, call, *argv, "--batch", "5678") == (
        "measuring this report needs more than 3.0 GiB (a training call on 1,234 steps x batch "
        f"5,678: its input alone) but this machine has 3.0 GiB available; give a smaller {smaller}")
    monkeypatch.setattr(tape_command, "least_bytes", lambda *a: ProbeNeed(3 * 2**30, 1234))
    monkeypatch.setattr(tape_command, "probe_bytes", lambda *a: ProbeNeed(2**32, None))
    assert refused(capsys, call, *argv, "--batch", "5678") == (
        "measuring this report needs about 4.0 GiB (a training call on batch 5,678: its tape and "
        f"temporaries) but this machine has 3.0 GiB available; give a smaller {smaller}")
    assert spy.asked == []


def test_the_free_memory_is_that_of_the_networks_backend(spy, monkeypatch):
    pytest.importorskip("array_api_strict")
    asked = []
    monkeypatch.setattr(tape_command, "free_memory", lambda backend: asked.append(backend.name))
    on_numpy, no_parameters = lstm(), dt.Network([dt.Relu()])
    with dt.use_backend("array_api_strict"):
        assert tape(TrainingCall(on_numpy), "--seq-len", "2") == 0
        assert tape(TrainingCall(no_parameters), "--shape", "2") == 0
    assert asked == ["numpy", "array_api_strict"]


def test_no_known_free_memory_refuses_nothing(capsys, spy, monkeypatch):
    monkeypatch.setattr(tape_command, "free_memory", lambda backend: None)
    monkeypatch.setattr(tape_command, "least_bytes", lambda *a: ProbeNeed(2**80, 1))
    assert tape(TrainingCall(lstm()), "--seq-len", "2") == 0


@pytest.mark.parametrize("raised, message", [
    (ValueError("tape_report: bad"), "tape_report: bad"),
    (TypeError("tape_report: worse"), "tape_report: worse"),
    (MemoryError(), "out of memory while measuring this report; give a smaller --seq-len, "
     "--batch or --tape"),
])
def test_what_the_report_raises_is_one_line(capsys, monkeypatch, raised, message):
    def fails(*args, **kwargs):
        raise raised

    monkeypatch.setattr(tape_command, "tape_report", fails)
    assert refused(capsys, TrainingCall(lstm()), "--seq-len", "2") == message


def matplotlib_found(monkeypatch, found: bool) -> None:
    """``dualtape tape`` finds matplotlib, or not, whether it is installed here or not."""
    monkeypatch.setattr("importlib.util.find_spec",
                        lambda name: object() if found and name == "matplotlib" else None)


def test_the_plot_needs_matplotlib_and_a_place_to_write(capsys, spy, monkeypatch, tmp_path):
    matplotlib_found(monkeypatch, True)
    missing = str(tmp_path / "no" / "a.png")
    assert refused(capsys, TrainingCall(lstm()), "--seq-len", "2", "--plot", missing) == (
        f"cannot write {missing}: its folder does not exist")
    matplotlib_found(monkeypatch, False)
    assert refused(capsys, TrainingCall(lstm()), "--seq-len", "2", "--plot", "a.png") == (
        "--plot needs matplotlib: pip install 'dualtape[bench]'")
    assert spy.asked == []


@pytest.mark.parametrize("raised, why", [(OSError(28, "No space left on device"),
                                          "No space left on device"),
                                         (ValueError("no bars"), "no bars")])
def test_a_plot_that_fails_is_one_line_after_the_report(capsys, monkeypatch, spy, tmp_path,
                                                       raised, why):
    def fails(path, report):
        raise raised

    monkeypatch.setattr(tape_command, "write_plot", fails)
    matplotlib_found(monkeypatch, True)
    picture = str(tmp_path / "a.png")
    assert tape(TrainingCall(lstm()), "--seq-len", "2", "--plot", picture) == 1
    assert capsys.readouterr() == ("REPORT\n", f"dualtape tape: error: cannot write {picture}: "
                                               f"{why}\n")


@pytest.mark.parametrize("policy", ["full", "2"])
def test_the_plot_has_a_bar_per_layer_and_one_for_the_checkpointed_tape(capsys, monkeypatch,
                                                                       tmp_path, policy):
    pyplot = pytest.importorskip("matplotlib.pyplot")
    drawn, close = [], pyplot.close
    monkeypatch.setattr(pyplot, "close", lambda fig: drawn.append(fig) or close(fig))
    monkeypatch.setitem(pyplot.rcParams, "savefig.format", "svg")  # a PNG all the same
    picture = tmp_path / "a.png"
    net = dt.RecurrentNetwork([dt.LSTM(3, 4, seed=1), dt.GRU(4, 2, seed=2)])
    assert tape(TrainingCall(net), "--seq-len", "6", "--tape", policy, "--plot",
                str(picture)) == 0
    assert capsys.readouterr().out.endswith(f"\nwrote {picture}\n")
    png = picture.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (660, 495)  # 6 x 4.5 inches at 110 dpi
    [fig] = drawn
    [ax] = fig.axes
    report = dt.tape_report(net, (6, 1, 3), tape=int(policy) if policy != "full" else "full",
                            peak=False)
    full = [layer.bytes / 2**20 for layer in report.layers]
    bars = [(round(b.get_x(), 6), round(b.get_width(), 6), b.get_height()) for b in ax.patches]
    if policy == "full":
        assert bars == [(-0.4, 0.8, full[0]), (0.6, 0.8, full[1])]
        assert ax.get_legend() is None
    else:
        kept = [(layer.checkpoint_bytes + layer.segment_bytes) / 2**20
                for layer in report.layers]
        assert bars == [(-0.4, 0.4, full[0]), (0.6, 0.4, full[1]), (0.0, 0.4, kept[0]),
                        (1.0, 0.4, kept[1])]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [
            "full tape", "tape=2, held in backward"]
    labels = ax.get_xticklabels()
    assert [t.get_text() for t in labels] == ["0 LSTM(3, 4)", "1 GRU(4, 2)"]
    assert {(t.get_rotation(), t.get_ha(), t.get_fontsize()) for t in labels} == {(30, "right", 8)}
    assert ax.get_ylabel() == "MiB"
    assert ax.get_title() == "tape per layer (T=6, batch 1, numpy)"
    assert tuple(fig.get_size_inches()) == (6.0, 4.5)


def test_a_networks_plot_title_has_no_steps(monkeypatch, tmp_path):
    pyplot = pytest.importorskip("matplotlib.pyplot")
    drawn, close = [], pyplot.close
    monkeypatch.setattr(pyplot, "close", lambda fig: drawn.append(fig) or close(fig))
    layers = [dt.FullyConnected(3, 3, seed=k) for k in range(6)]
    tape_command.write_plot(str(tmp_path / "a.png"), dt.tape_report(dt.Network(layers), (2, 3),
                                                                      peak=False))
    [fig] = drawn
    assert fig.axes[0].get_title() == "tape per layer (batch 2, numpy)"
    assert tuple(fig.get_size_inches()) == (pytest.approx(0.9 * 6 + 2), 4.5)


def test_the_help_says_what_each_option_does(capsys):
    with pytest.raises(SystemExit):
        main(["tape", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for words in [
        "usage: dualtape tape [-h] [--seq-len T] [--batch B] [--shape C,H,W] [--tape POLICY] "
        "[--optimizer {adam,none,sgd}] [--loss {", "CHECKPOINT",
        "Print what the tape of a saved network (a dualtape file or a train-text checkpoint) "
        "keeps for one batch, layer by layer, what a checkpointed tape would keep instead, the "
        "parameters' and optimizer state's bytes, and the measured peak of one training call.",
        "CHECKPOINT a file dualtape.save wrote",
        "--seq-len T steps per sequence (recurrent networks; a train-text checkpoint's default: "
        "its windows' length)",
        "--batch B examples per batch (default 1; a train-text checkpoint's: its batch)",
        "--shape C,H,W one example's shape, for a network whose input has free axes",
        "--tape POLICY the checkpointed tape to compare: sqrt (default), k steps, or full",
        "whose state to count: sgd (with momentum), adam, none (default: a train-text "
        "checkpoint's own, else sgd)",
        "the loss of the measured training call (default: softmax_cross_entropy for a "
        "train-text checkpoint, as it trains; cross_entropy after a final Softmax; else "
        "squared_error)",
        "--plot FILE.png also draw one bar per layer (matplotlib)",
    ]:
        assert words in out, words
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "tape what a saved network's tape keeps, layer by layer" in " ".join(
        capsys.readouterr().out.split())
