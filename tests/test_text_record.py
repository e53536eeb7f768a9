"""train-text's record: the log (--log), its plot (dualtape plot) and the console's readings."""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import signal
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from dualtape import cli
from dualtape.backend import resolve_backend
from dualtape.text import cli as text_cli
from dualtape.text import console, plot, record
from dualtape.text.checkpoint import load_checkpoint
from dualtape.text.loop import RunLimits, run_training
from dualtape.text.record import COLUMNS, LogError, Row, TrainingLog, read_log
from dualtape.text.trainer import TextTrainer

from .test_text import SMALL, TEXT, TINY, Recorder, corpus, fails, run
from .test_text_safety import on_terminal, wait_for_line

__all__ = ["corpus"]
ROW = Row(10, 1.5, 2.25, None, 1000.0, 0.5)


def rows(n: int, first: int = 1, valid: float | None = None) -> list[Row]:
    return [Row(first + k, float(first + k), 3.0 - 0.1 * k, valid, 500.0, 0.01) for k in range(n)]


def write_rows(log: TrainingLog, written: list[Row]) -> None:
    for row in written:
        assert log.write(row) is None
    log.close()


# --- the format ------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_rows_round_trip_with_and_without_a_held_out_loss(tmp_path, suffix):
    path = tmp_path / f"run{suffix}"
    written = [ROW, ROW._replace(step=20, valid_loss=0.75)]
    write_rows(TrainingLog.open(path), written)
    log = read_log(path)
    assert log.rows == written and log.skipped == 0
    assert log.rows[1].valid_bpc == 0.75 / math.log(2)
    lines = path.read_text().splitlines()
    if suffix == ".csv":
        assert lines == [",".join(COLUMNS), "10,1.5,2.25,,,1000.0,0.5",
                         f"20,1.5,2.25,0.75,{0.75 / math.log(2):.9g},1000.0,0.5"]
    else:
        assert '"valid_loss": null, "valid_bpc": null' in lines[0] and len(lines) == 2


@pytest.mark.parametrize("loss", [math.nan, math.inf, -math.inf])
def test_a_loss_that_is_not_finite_is_written_as_missing_never_as_nan_or_inf(tmp_path, loss):
    csv, jsonl = tmp_path / "run.csv", tmp_path / "run.jsonl"
    diverged = ROW._replace(train_loss=loss, valid_loss=loss)
    for path in (csv, jsonl):
        write_rows(TrainingLog.open(path), [diverged])
    assert csv.read_text().splitlines()[1] == "10,1.5,,,,1000.0,0.5"

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    fields = json.loads(jsonl.read_text(), parse_constant=refuse)  # as strict readers do
    assert [fields[k] for k in ("train_loss", "valid_loss", "valid_bpc")] == [None] * 3


@pytest.mark.parametrize("name", ["run.txt", "run", "run.csv.gz"])
def test_a_log_name_without_a_known_suffix_is_one_line(tmp_path, name):
    with pytest.raises(LogError, match="must end in .csv or .jsonl"):
        TrainingLog.open(tmp_path / name)


@pytest.mark.parametrize("name, text, match", [
    ("other.csv", "step,loss\n1,2\n", "its first line is not step,seconds"),
    ("other.csv", "step,seconds,train_loss\n", "its first line is not step,seconds"),
    ("other.jsonl", '{"step": 1, "loss": 2}\n', "not a JSON object of step"),
    ("other.jsonl", '{"step": 1, "seconds": 1, "train_loss": 1, "valid_loss": null, '
     '"valid_bpc": null, "chars_per_s": 1, "learning_rate": 1, "extra": 0}\n',
     "not a JSON object of step"),
])
def test_a_foreign_file_is_not_taken_for_a_log(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(LogError, match=match):
        read_log(path)
    with pytest.raises(LogError, match=match):
        TrainingLog.open(path, resumed_step=5)
    assert path.read_text() == text


def test_an_empty_log_reads_as_no_rows_and_is_written_as_new(tmp_path):
    path = tmp_path / "run.csv"
    path.write_bytes(b"")
    assert read_log(path).rows == []
    write_rows(TrainingLog.open(path), [ROW])
    assert read_log(path).rows == [ROW]


# --- appending and resuming ------------------------------------------------------------------


def test_a_resumed_run_appends_once_and_its_seconds_continue(tmp_path):
    path = tmp_path / "run.csv"
    write_rows(TrainingLog.open(path), rows(3))  # steps 1-3 at 1-3 s
    log = TrainingLog.open(path, resumed_step=2)  # the checkpoint was at step 2
    assert log.seconds_before == 2.0
    write_rows(log, [Row(3, 0.5, 1.0, None, 1.0, 0.01), Row(4, 1.0, 0.9, None, 1.0, 0.01)])
    text = path.read_text()
    assert text.count("step,") == 1  # one header
    kept = read_log(path)
    assert [(r.step, r.seconds) for r in kept.rows] == [(1, 1.0), (2, 2.0), (3, 2.5), (4, 3.0)]
    assert kept.rows[2].train_loss == 1.0 and kept.skipped == 0  # the later step 3 replaced


def test_a_new_run_refuses_another_runs_log_unless_told_to_replace_it(tmp_path):
    path = tmp_path / "run.jsonl"
    write_rows(TrainingLog.open(path), rows(3))
    with pytest.raises(LogError, match=r"holds another run's record \(up to step 3\)"):
        TrainingLog.open(path)
    log = TrainingLog.open(path, replace=True)
    assert read_log(path).rows == rows(3)  # nothing is lost before the first row
    write_rows(log, [ROW])
    assert read_log(path).rows == [ROW]


def test_a_row_after_a_line_cut_short_stays_on_its_own_line(tmp_path):
    path = tmp_path / "run.csv"
    write_rows(TrainingLog.open(path), rows(2))
    with open(path, "a") as f:
        f.write("3,3.0,2.")  # a write cut short
    write_rows(TrainingLog.open(path, resumed_step=2), [Row(3, 1.0, 1.0, None, 1.0, 0.01)])
    log = read_log(path)
    assert [r.step for r in log.rows] == [1, 2, 3] and log.skipped == 1


# --- what may stand at the log's path --------------------------------------------------------


def test_folders_fifos_and_missing_folders_are_refused(tmp_path):
    (tmp_path / "dir.csv").mkdir()
    os.mkfifo(tmp_path / "fifo.csv")
    with pytest.raises(LogError, match="is a folder"):
        TrainingLog.open(tmp_path / "dir.csv")
    with pytest.raises(LogError, match="is a FIFO, not a regular file"):
        TrainingLog.open(tmp_path / "fifo.csv", resumed_step=1)
    with pytest.raises(LogError, match="its folder does not exist"):
        TrainingLog.open(tmp_path / "none" / "run.csv")


def test_the_default_log_never_follows_a_link_but_a_named_one_does(tmp_path):
    target, link = tmp_path / "real.csv", tmp_path / "link.csv"
    write_rows(TrainingLog.open(target), rows(1))
    link.symlink_to(target)
    with pytest.raises(LogError, match="is a symbolic link; refusing to follow it"):
        TrainingLog.open(link, resumed_step=1, follow=False)
    dangling = tmp_path / "dangling.csv"
    dangling.symlink_to(tmp_path / "elsewhere.csv")
    with pytest.raises(LogError, match="symbolic link"):
        TrainingLog.open(dangling, follow=False)
    write_rows(TrainingLog.open(link, resumed_step=1), [Row(2, 0.0, 1.0, None, 1.0, 0.01)])
    assert [r.step for r in read_log(target).rows] == [1, 2]


def test_a_link_planted_after_the_check_is_not_followed(tmp_path):
    path, elsewhere = tmp_path / "run.csv", tmp_path / "victim.csv"
    log = TrainingLog.open(path, follow=False)
    elsewhere.write_text("precious\n")
    path.symlink_to(elsewhere)
    assert "cannot write the log" in log.write(ROW)
    assert elsewhere.read_text() == "precious\n"


# --- a log that cannot be written ------------------------------------------------------------


def failing_writes(monkeypatch, log_name: str, result: int | None = None) -> None:
    """Writes to the file named ``log_name`` fail with ENOSPC (or write ``result`` bytes)."""
    real = os.write

    def write(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(log_name) and data.count(b",") > 3:
            if result is None:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(fd, data[:result])
        return real(fd, data)

    monkeypatch.setattr(record.os, "write", write)


@pytest.mark.parametrize("short", [None, 3], ids=["enospc", "short-write"])
def test_a_full_disk_stops_the_log_with_one_warning_and_training_goes_on(tmp_path, monkeypatch,
                                                                        short):
    path, model = tmp_path / "run.csv", tmp_path / "run.npz"
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    failing_writes(monkeypatch, "run.csv", short)
    recorder = Recorder()
    log = TrainingLog.open(path)
    run_training(trainer, RunLimits(steps=6, log_every=2, sample_chars=0, save=str(model),
                                    log=log), recorder)
    warnings = [m for m in recorder.messages if m.startswith("warning")]
    assert len(warnings) == 1 and f"cannot write the log {path}" in warnings[0]
    assert "logging stops here, training and checkpoints go on" in warnings[0]
    assert len(recorder.readings) == 3 and load_checkpoint(model).step == 6
    assert log.failed is not None and log.rows == 0
    assert text_cli._closing(log, None, 16) == [f"log: {path} is incomplete: {log.failed}"]


def test_ranks_that_do_not_write_leave_the_log_alone(tmp_path):
    path = tmp_path / "run.csv"
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    run_training(trainer, RunLimits(steps=4, log_every=2, sample_chars=0, writes=False,
                                    log=TrainingLog.open(path)), Recorder())
    assert not path.exists()


def test_the_loop_logs_each_reading_with_the_rate(tmp_path):
    path = tmp_path / "run.jsonl"
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    recorder = Recorder()
    run_training(trainer, RunLimits(steps=5, log_every=2, sample_chars=0,
                                    log=TrainingLog.open(path)), recorder)
    logged = read_log(path).rows
    assert [(r.step, r.train_loss) for r in logged] == [(s, pytest.approx(v, rel=1e-8))
                                                        for s, v, _ in recorder.readings]
    assert [r.step for r in logged] == [2, 4, 5] and {r.learning_rate for r in logged} == {0.05}
    assert all(0 <= a.seconds <= b.seconds for a, b in zip(logged, logged[1:], strict=False))
    assert logged[-1].seconds > 0


# --- the command line ------------------------------------------------------------------------


def test_train_text_logs_beside_the_checkpoint_and_a_resume_appends(capsys, corpus, tmp_path):
    model = tmp_path / "m.npz"
    args = [str(corpus), *SMALL, "--sample-chars", "0", "--log-every", "2"]
    code, out, err = run(capsys, "train-text", *args, "--steps", "4", "--save", str(model))
    assert code == 0, err
    default = f"{model}.log.csv"
    assert f"log: {default}, a row every 2 steps" in out
    assert f"log: {default} (+2 rows); plot it with: dualtape plot {default}" in out
    assert out.splitlines()[-1].startswith("checkpoint: ")
    code, out, err = run(capsys, "train-text", *args, "--steps", "3", "--resume", str(model))
    assert code == 0, err
    log = read_log(default)
    assert [r.step for r in log.rows] == [2, 4, 6, 7]
    assert Path(default).read_text().count("step,") == 1
    fails(capsys, "train-text", *args, "--steps", "1", "--save", str(tmp_path / "n.npz"),
          "--log", default, match=f"the log {default} holds another run's record (up to step "
          "7); choose another --log")


def test_overwrite_starts_the_log_afresh(capsys, corpus, tmp_path):
    model = tmp_path / "m.npz"
    args = [str(corpus), *SMALL, "--sample-chars", "0", "--log-every", "1", "--save", str(model)]
    assert run(capsys, "train-text", *args, "--steps", "3")[0] == 0
    code, _, err = run(capsys, "train-text", *args, "--steps", "1", "--overwrite", "--seed", "9")
    assert code == 0, err
    assert [r.step for r in read_log(f"{model}.log.csv").rows] == [1]


def test_the_default_log_is_refused_through_a_link(capsys, corpus, tmp_path):
    victim = tmp_path / "victim.csv"
    victim.write_text("step,seconds,train_loss,valid_loss,valid_bpc,chars_per_s,learning_rate\n")
    model = tmp_path / "m.npz"
    Path(f"{model}.log.csv").symlink_to(victim)
    fails(capsys, "train-text", *SMALL, "--steps", "1", "--save", str(model),
          match="is a symbolic link; refusing to follow it")


def test_no_log_and_log_options(capsys, corpus, tmp_path):
    model = tmp_path / "m.npz"
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "1",
                       "--sample-chars", "0", "--save", str(model), "--no-log")
    assert code == 0 and "log:" not in out and not Path(f"{model}.log.csv").exists()
    fails(capsys, "train-text", *SMALL, "--log", str(tmp_path / "a.csv"), "--no-log",
          match="give --log PATH or --no-log, not both")
    fails(capsys, "train-text", *SMALL, "--log", str(tmp_path / "a.txt"),
          match="must end in .csv or .jsonl")
    fails(capsys, "train-text", *SMALL, "--log", "", match="--log must be a path")


def test_the_help_documents_the_columns(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train-text", "--help"])
    out = capsys.readouterr().out
    text = " ".join(out.split())
    assert "step, seconds (of training, summed over resumes)" in text
    assert "valid_bpc (bits/char; empty without a held-out loss), chars_per_s" in text
    assert "the checkpoint's path + .log.csv" in text


def test_the_log_survives_kill_9_and_a_resume_continues_it(corpus, tmp_path):
    model, path = tmp_path / "m.npz", tmp_path / "run.csv"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dualtape.cli", "train-text", str(corpus), *SMALL,
         "--log-every", "1", "--sample-chars", "0", "--save", str(model), "--save-every", "3",
         "--log", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    for _ in range(8):
        wait_for_line(proc, "step ")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    lines = path.read_text().split("\n")
    assert lines[0] == ",".join(COLUMNS) and len(lines) >= 9
    complete = lines[1:-1] if lines[-1] else lines[1:-1]
    assert all(record.decode(line, "csv") is not None for line in complete[:-1])
    step = load_checkpoint(model).step
    assert step >= 3
    done = subprocess.run(
        [sys.executable, "-m", "dualtape.cli", "train-text", str(corpus), "--resume", str(model),
         "--steps", "2", "--log-every", "1", "--sample-chars", "0", "--log", str(path)],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    log = read_log(path)
    assert [r.step for r in log.rows] == list(range(1, step + 3))
    assert all(a.seconds <= b.seconds for a, b in zip(log.rows, log.rows[1:], strict=False))
    assert log.rows[-1].seconds > log.rows[step - 1].seconds  # continued, not restarted


# --- the console -----------------------------------------------------------------------------


def test_plain_lines_come_at_every_reading_with_the_held_out_loss(capsys):
    reporter = console.PlainReporter()
    reporter.progress(10, 2.0, 100.0)
    reporter.progress(20, 1.5, 100.0, valid_loss=2 * math.log(2))
    reporter.progress(30, 1.4, 100.0, valid_loss=3.0)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "step     10  loss 2.000  100 chars/s"
    assert lines[1] == "step     20  loss 1.500  100 chars/s  held-out 1.386 (2.000 bits/char)"
    assert len(lines) == 3


def test_the_closing_lines_give_the_best_held_out_bits_per_character(tmp_path):
    log = TrainingLog.open(tmp_path / "a b.csv")
    write_rows(log, [ROW])
    assert text_cli._closing(log, [40, math.log(2) * 1.25], 16) == [
        "best held-out loss: 1.250 bits/char (0.866 nats) at step 40",
        f"log: {log.path} (+1 rows); plot it with: dualtape plot '{log.path}'"]
    assert text_cli._closing(None, None, 16) == []


@pytest.mark.parametrize("columns, lines", [(0, 0), (0, 24), (80, 0), (1, 24)])
def test_a_terminal_without_a_size_gets_a_bar_of_a_fixed_size(monkeypatch, columns, lines):
    monkeypatch.setattr(console.os, "get_terminal_size",
                        lambda fd: os.terminal_size((columns, lines)))
    monkeypatch.setattr(sys, "stdout", sys.__stdout__)
    assert console.bar_shape() == console.UNKNOWN_SIZE


def test_a_terminal_with_a_size_gets_a_bar_that_follows_it(monkeypatch):
    monkeypatch.setattr(console.os, "get_terminal_size", lambda fd: os.terminal_size((100, 30)))
    monkeypatch.setattr(sys, "stdout", sys.__stdout__)
    assert console.bar_shape() == {"dynamic_ncols": True}


@pytest.mark.parametrize("columns, rows", [(80, 24), (0, 0)], ids=["80x24", "0x0"])
def test_on_a_terminal_every_reading_stays_above_the_bar(corpus, monkeypatch, columns, rows):
    pytest.importorskip("tqdm")
    import pty

    real = pty.openpty

    def openpty():
        master, slave = real()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        return master, slave

    monkeypatch.setattr(pty, "openpty", openpty)
    argv = [sys.executable, "-m", "dualtape.cli", "train-text", str(corpus), *SMALL,
            "--steps", "6", "--log-every", "2", "--sample-chars", "0"]
    code, shown, err = on_terminal(argv)
    assert code == 0, err
    text = shown.decode()
    for step in (2, 4, 6):
        assert f"step {step:>6}  loss" in text
    assert "6/6" in text  # the bar itself
    assert "stopped (step limit) at step 6" in text


# --- dualtape plot ---------------------------------------------------------------------------


def two_logs(tmp_path) -> list[Path]:
    first, second = tmp_path / "a.csv", tmp_path / "b.jsonl"
    write_rows(TrainingLog.open(first), rows(20, valid=2.0))
    write_rows(TrainingLog.open(second), rows(10))
    return [first, second]


def test_plot_writes_a_png_with_a_line_per_run(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image as image
    logs = two_logs(tmp_path)
    output = tmp_path / "both.png"
    code, out, err = run(capsys, "plot", *map(str, logs), "-o", str(output))
    assert code == 0 and out == f"wrote {output}\n", err
    pixels = image.imread(output)
    assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 600
    import matplotlib.pyplot as plt

    fig = plot.figure([read_log(path) for path in logs])
    by_step, by_time = fig.axes
    labels = [line.get_label() for line in by_step.lines]
    assert labels == [f"{logs[0]} training", f"{logs[0]} held-out", f"{logs[1]} training"]
    assert by_step.lines[1].get_linestyle() == "--"
    assert list(by_step.lines[1].get_ydata()) == pytest.approx([2.0 / math.log(2)] * 20)
    assert list(by_time.lines[2].get_xdata()) == [float(s) for s in range(1, 11)]
    colours = [line.get_color() for line in by_step.lines]
    assert colours[0] == colours[1] != colours[2]
    for colour in (colours[0], colours[2]):  # each run's colour is drawn in the image
        rgb = plt.matplotlib.colors.to_rgb(colour)
        assert (abs(pixels[..., :3] - rgb).max(axis=-1) < 0.05).sum() > 100
    plt.close(fig)


@pytest.mark.parametrize("where", ["first", "last"])
def test_an_empty_log_among_others_is_named_and_the_rest_plotted(capsys, tmp_path, where):
    pytest.importorskip("matplotlib")
    empty = tmp_path / "empty.csv"
    empty.write_text(record.CSV_HEADER + "\n")  # a run stopped before its first row
    logs = [empty, *two_logs(tmp_path)] if where == "first" else [*two_logs(tmp_path), empty]
    output = tmp_path / "all.png"
    code, out, err = run(capsys, "plot", *map(str, logs), "-o", str(output))
    assert code == 0 and out == f"{empty}: no rows yet\nwrote {output}\n", err
    assert output.read_bytes().startswith(plot.PNG_SIGNATURE)


def test_plot_defaults_to_the_first_log_with_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    logs = two_logs(tmp_path)
    code, out, _ = run(capsys, "plot", str(logs[0]))
    assert code == 0 and (tmp_path / "a.png").read_bytes().startswith(plot.PNG_SIGNATURE)
    code, _, _ = run(capsys, "plot", str(logs[0]))  # a PNG there is replaced
    assert code == 0


def test_plot_errors_are_one_line(capsys, tmp_path):
    logs = two_logs(tmp_path)
    fails(capsys, "plot", str(tmp_path / "none.csv"), match="cannot read")
    fails(capsys, "plot", str(tmp_path / "model.npz"), match="must end in .csv or .jsonl")
    (tmp_path / "other.csv").write_text("x,y\n1,2\n")
    fails(capsys, "plot", str(tmp_path / "other.csv"), match="is not a train-text log")
    fails(capsys, "plot", str(logs[0]), "-o", str(logs[0]), match="must end in .png")
    link = tmp_path / "a.png"
    link.symlink_to(logs[0])
    fails(capsys, "plot", str(logs[0]), "-o", str(link), match="is one of the logs")
    notes = tmp_path / "notes.png"
    notes.write_text("not an image")
    fails(capsys, "plot", str(logs[0]), "-o", str(notes), match="is not a PNG; refusing")
    assert notes.read_text() == "not an image"
    empty = tmp_path / "empty.csv"
    empty.write_text(record.CSV_HEADER + "\n")
    fails(capsys, "plot", str(empty), "-o", str(tmp_path / "e.png"), match="no log holds a row")


def test_plot_of_a_deeply_nested_json_line_is_one_line(capsys, tmp_path):
    nested = tmp_path / "nested.jsonl"
    nested.write_text("[" * 200_000 + "\n")
    fails(capsys, "plot", str(nested), "-o", str(tmp_path / "n.png"),
          match="is not a train-text log")


def test_a_log_link_into_a_missing_folder_is_refused_at_start(capsys, corpus, tmp_path):
    link = tmp_path / "log.csv"
    link.symlink_to(tmp_path / "gone" / "log.csv")
    fails(capsys, "train-text", str(corpus), *SMALL, "--steps", "1", "--log", str(link),
          match="its folder does not exist")


def test_plot_without_matplotlib_names_the_extra(capsys, tmp_path, monkeypatch):
    logs = two_logs(tmp_path)
    real = plot.importlib.util.find_spec
    monkeypatch.setattr(plot.importlib.util, "find_spec",
                        lambda name: None if name == "matplotlib" else real(name))
    fails(capsys, "plot", str(logs[0]), "-o", str(tmp_path / "x.png"),
          match="plotting needs matplotlib: pip install 'dualtape[bench]'")
