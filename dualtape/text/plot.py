"""``dualtape plot LOG...``: the training curves of train-text logs, several runs on one figure.

Two panels, the loss in bits per character against the step and against the seconds of
training (minutes or hours for long runs): one colour per run, training loss solid, held-out
loss dashed (where the log has one). The image is a PNG written atomically (``files``); an
existing file there is replaced only when it is a PNG, so a log given by mistake as the
output is never overwritten. matplotlib (the ``bench`` extra) is imported only here, with the
Agg backend (no display needed). Each problem is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from ..files import open_regular, same_file, write_atomically
from .record import Log, LogError, read_log

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def register(commands: Any) -> None:
    """Add ``plot`` to the ``dualtape`` subcommands."""
    p = commands.add_parser(
        "plot", help="plot the loss curves of train-text logs",
        description="Plot training and held-out loss (bits per character) against step and "
        "time for one or more train-text logs (--log PATH, or the .log.csv beside a "
        "checkpoint), one colour per run, into a PNG (needs matplotlib: pip install "
        "'dualtape[bench]').")
    p.add_argument("logs", nargs="+", metavar="LOG", help="a .csv or .jsonl log of train-text")
    p.add_argument("-o", "--output", metavar="PNG",
                   help="the image to write (default: the first LOG with .png for its suffix)")
    p.set_defaults(run=plot_command)


def _fail(message: str) -> int:
    print(f"dualtape plot: error: {message}", file=sys.stderr, flush=True)
    return 1


def plot_command(args: argparse.Namespace) -> int:
    """``dualtape plot``: read every log, draw them, write the PNG and say where."""
    output = args.output or str(Path(args.logs[0]).with_suffix(".png"))
    try:
        check_output(output, args.logs)
        logs = [read_log(path) for path in args.logs]
    except LogError as exc:
        return _fail(str(exc))
    for log in logs:
        if log.skipped:
            print(f"{log.path}: skipped {log.skipped} lines that do not parse (a write cut "
                  "short leaves one)")
        if not log.rows:
            print(f"{log.path}: no rows yet")
    if not any(log.rows for log in logs):
        return _fail("no log holds a row to plot")
    if importlib.util.find_spec("matplotlib") is None:
        return _fail("plotting needs matplotlib: pip install 'dualtape[bench]'")
    try:
        write_plot(output, logs)
    except OSError as exc:
        return _fail(f"cannot write {output}: {exc.strerror or exc}")
    except ValueError as exc:
        return _fail(f"cannot write {output}: {exc}")
    print(f"wrote {output}")
    return 0


def check_output(output: str, logs: list[str]) -> None:
    """``LogError`` unless ``output`` ends in .png, is none of the ``logs``, and holds a PNG
    when it exists."""
    if Path(output).suffix.lower() != ".png":
        raise LogError(f"--output {output}: the image's name must end in .png")
    if any(same_file(log, output) for log in logs):
        raise LogError(f"--output {output} is one of the logs; choose another name")
    if not os.path.lexists(output):
        return
    try:
        handle, _ = open_regular(output)
    except (OSError, ValueError):
        raise LogError(f"--output {output} exists and is not a regular file; choose another "
                       "name") from None
    with handle:
        if handle.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
            raise LogError(f"--output {output} exists and is not a PNG; refusing to replace "
                           "it (choose another name)")


def _time_axis(seconds: float) -> tuple[float, str]:
    """The divisor and the name of the time unit for a run of ``seconds``."""
    if seconds > 2 * 3600:
        return 3600.0, "hours"
    if seconds > 120:
        return 60.0, "minutes"
    return 1.0, "seconds"


def figure(logs: list[Log]) -> Any:
    """The matplotlib figure of ``logs``: two panels (against step, against time), per run a
    training line and, where it has held-out losses, a dashed held-out line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    drawn = [log for log in logs if log.rows]
    scale, unit = _time_axis(max(log.rows[-1].seconds for log in drawn))
    for k, log in enumerate(drawn):
        colour = plt.get_cmap("tab10")(k % 10)
        steps = [r.step for r in log.rows]
        times = [r.seconds / scale for r in log.rows]
        train = [r.train_bpc for r in log.rows]
        held = [(r.step, r.seconds / scale, r.valid_bpc) for r in log.rows
                if r.valid_bpc is not None]
        for axis, xs in ((by_step, steps), (by_time, times)):
            axis.plot(xs, train, color=colour, label=f"{log.path} training")
            if held:
                at = [h[0] if axis is by_step else h[1] for h in held]
                axis.plot(at, [h[2] for h in held], color=colour, linestyle="--",
                          label=f"{log.path} held-out")
    by_step.set(xlabel="step", ylabel="loss (bits per character)", title="against steps")
    by_time.set(xlabel=f"{unit} of training", title="against time")
    for axis in (by_step, by_time):
        axis.grid(alpha=0.3)
    by_step.legend(fontsize=7)
    fig.tight_layout()
    return fig


def write_plot(output: str, logs: list[Log]) -> None:
    """``figure(logs)`` written to ``output`` as a PNG, atomically."""
    fig = figure(logs)
    import matplotlib.pyplot as plt

    try:
        write_atomically(output, lambda f: fig.savefig(f, format="png", dpi=110))
    finally:
        plt.close(fig)
