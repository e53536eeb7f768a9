"""``dualtape plot`` in this process (text/plot.py): its help, each message in full, the time
axis's unit at its bounds, and the figure's layout, lines, colours and image size."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dualtape import cli
from dualtape.text import plot, record
from dualtape.text.record import Row, TrainingLog, read_log

from .test_text import run
from .test_text_record import two_logs, write_rows


def one_line_error(capsys, *argv: str) -> str:
    """The error line of a ``dualtape`` command that fails (exit status 1) without its
    ``dualtape plot: error:`` prefix."""
    code, out, err = run(capsys, *argv)
    assert code == 1 and err.startswith("dualtape plot: error: "), (out, err)
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err[len("dualtape plot: error: "):-1]


def test_the_help_describes_the_command_and_its_arguments(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "plot plot the loss curves of train-text logs" in " ".join(
        capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        cli.main(["plot", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: dualtape plot [-h] [-o PNG] LOG [LOG ...] Plot training and "
                          "held-out loss (bits per character) against step and time for one "
                          "or more train-text logs (--log PATH, or the .log.csv beside a "
                          "checkpoint), one colour per run, into a PNG (needs matplotlib: pip "
                          "install 'dualtape[bench]'). ")
    assert " LOG a .csv or .jsonl log of train-text " in out
    assert (" -o PNG, --output PNG the image to write (default: the first LOG with .png for its "
            "suffix)") in out


def test_each_refusal_is_its_whole_line(capsys, tmp_path, monkeypatch):
    logs = list(map(str, two_logs(tmp_path)))
    folder = tmp_path / "folder.png"
    folder.mkdir()
    assert one_line_error(capsys, "plot", logs[0], "-o", str(folder)) == (
        f"--output {folder} exists and is not a regular file; choose another name")
    notes = tmp_path / "notes.png"
    notes.write_text("not an image")
    assert one_line_error(capsys, "plot", logs[0], "-o", str(notes)) == (
        f"--output {notes} exists and is not a PNG; refusing to replace it (choose another "
        "name)")
    empty = tmp_path / "empty.csv"
    empty.write_text(record.CSV_HEADER + "\n")  # a run stopped before its first row
    assert one_line_error(capsys, "plot", str(empty)) == "no log holds a row to plot"
    away = tmp_path / "gone" / "x.png"
    assert one_line_error(capsys, "plot", logs[0], "-o", str(away)) == (
        f"cannot write {away}: its folder does not exist")

    def too_large(output, logs):
        raise ValueError("Image size of 1e9 pixels is too large")

    monkeypatch.setattr(plot, "write_plot", too_large)
    assert one_line_error(capsys, "plot", logs[0], "-o", str(tmp_path / "x.png")) == (
        f"cannot write {tmp_path / 'x.png'}: Image size of 1e9 pixels is too large")
    monkeypatch.setattr(plot.importlib.util, "find_spec", lambda name: None)
    assert one_line_error(capsys, "plot", logs[0]) == (
        "plotting needs matplotlib: pip install 'dualtape[bench]'")


def test_a_log_with_a_line_cut_short_says_so_and_is_plotted(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    log = two_logs(tmp_path)[0]
    with open(log, "a") as f:
        f.write("21,1.5")  # a write cut short
    code, out, err = run(capsys, "plot", str(log))
    assert code == 0, err
    assert out == (f"{log}: skipped 1 lines that do not parse (a write cut short leaves one)\n"
                   f"wrote {tmp_path / 'a.png'}\n")


@pytest.mark.parametrize("seconds, axis", [
    (0.5, (1.0, "seconds")), (120, (1.0, "seconds")), (120.5, (60.0, "minutes")),
    (7200, (60.0, "minutes")), (7200.5, (3600.0, "hours")),
])
def test_the_time_axis_counts_minutes_past_two_minutes_and_hours_past_two_hours(seconds, axis):
    assert plot._time_axis(seconds) == axis


def runs(tmp_path: Path) -> list[Path]:
    """Eleven logs: the first with held-out losses, running 300 s (minutes) though its middle
    row is at 20 s; the others 3 s each."""
    paths = []
    for k in range(11):
        path = tmp_path / f"run{k}.csv"
        seconds = (10.0, 20.0, 300.0) if k == 0 else (1.0, 2.0, 3.0)
        write_rows(TrainingLog.open(path), [
            Row(step, s, 3.0 - 0.5 * step, 2.5 if k == 0 else None, 100.0, 0.01)
            for step, s in zip((1, 2, 3), seconds, strict=True)])
        paths.append(path)
    return paths


def test_the_figure_has_two_panels_side_by_side_one_colour_per_run(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    logs = runs(tmp_path)
    fig = plot.figure([read_log(path) for path in logs])
    try:
        assert list(fig.get_size_inches()) == [12, 4.5]
        by_step, by_time = fig.axes
        left, right = by_step.get_position(), by_time.get_position()
        assert left.x1 < right.x0 and left.y0 == right.y0
        assert by_step.get_shared_y_axes().joined(by_step, by_time)
        assert (by_step.get_xlabel(), by_step.get_ylabel(), by_step.get_title()) == (
            "step", "loss (bits per character)", "against steps")
        assert (by_time.get_xlabel(), by_time.get_title()) == (
            "minutes of training", "against time")
        for axis in (by_step, by_time):
            assert axis.xaxis.get_gridlines()[0].get_alpha() == 0.3
        assert {text.get_fontsize() for text in by_step.get_legend().get_texts()} == {7}
        palette = plt.get_cmap("tab10")
        training = [by_step.lines[0], *by_step.lines[2:]]
        assert [to_rgba(line.get_color()) for line in training] == [
            palette(k % 10) for k in range(11)]
        held_by_step, held_by_time = by_step.lines[1], by_time.lines[1]
        assert held_by_step.get_linestyle() == "--" and held_by_step.get_label() == (
            f"{logs[0]} held-out")
        assert list(held_by_step.get_xdata()) == [1, 2, 3]
        assert list(held_by_step.get_ydata()) == [2.5 / math.log(2)] * 3
        assert list(held_by_time.get_xdata()) == [10 / 60, 20 / 60, 5.0]
        assert list(by_time.lines[0].get_xdata()) == [10 / 60, 20 / 60, 5.0]
    finally:
        plt.close(fig)


def test_the_image_is_a_png_at_110_dpi_whatever_matplotlibrc_says(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    output = tmp_path / "out.png"
    with matplotlib.rc_context({"savefig.format": "svg", "savefig.dpi": 50}):
        plot.write_plot(str(output), [read_log(path) for path in two_logs(tmp_path)])
    data = output.read_bytes()
    assert data.startswith(plot.PNG_SIGNATURE)
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (12 * 110, round(4.5 * 110))
