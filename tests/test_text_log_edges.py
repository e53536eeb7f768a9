"""The train-text log (``text/record.py``) at its edges: the digits a row keeps, the steps and
first lines it takes, bytes that are not UTF-8, each refusal's own words, the file's mode, and
what the first row finds when the file changed after the check. No arrays."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

from dualtape.text.record import (
    CSV_HEADER,
    LogError,
    Row,
    TrainingLog,
    decode,
    encode,
    read_log,
    worse_than_uniform,
)

ROW = Row(3, 1.0, 2.0, None, 10.0, 0.5)
LINE = "3,1.0,2.0,,,10.0,0.5"


def refused(message: str):
    """``pytest.raises`` of a ``LogError`` saying exactly ``message``."""
    return pytest.raises(LogError, match=f"^{re.escape(message)}$")


def a_log(path: Path, *lines: str) -> Path:
    path.write_text("".join(f"{line}\n" for line in (CSV_HEADER, *lines)))
    return path


def test_a_loss_of_exactly_a_uniform_guess_is_not_worse():
    assert worse_than_uniform(math.log(4), 4) == ""
    assert worse_than_uniform(math.log(4) * 1.001, 4) == (
        ": worse than a uniform guess over its 4 symbols (2.000 bits/char)")


def test_a_row_keeps_milliseconds_nine_digits_and_tenths_of_a_char():
    row = Row(7, 1.23456, 2.123456789123, 1.987654321987, 1234.5678, 0.0123456789123)
    assert encode(row, "csv") == b"7,1.235,2.12345679,1.98765432,2.86757903,1234.6,0.0123456789\n"


@pytest.mark.parametrize(("step", "taken"), [("0", 0), ("-1", None), ("1.5", None)])
def test_a_row_step_must_be_a_whole_number_from_zero(step, taken):
    row = decode(f"{step},1.0,2.0,,,10.0,0.5", "csv")
    assert (row if taken is None else row.step) == taken


@pytest.mark.parametrize("header", [f"{CSV_HEADER}\r", f"{CSV_HEADER} ", f"{CSV_HEADER}X"])
def test_only_a_carriage_return_may_end_the_header(tmp_path, header):
    path = tmp_path / "run.csv"
    path.write_bytes(f"{header}\n{LINE}\n".encode())
    if header.endswith("\r"):
        assert read_log(path).rows == [ROW]
    else:
        with refused(f"{path} is not a train-text log (its first line is not {CSV_HEADER})"):
            read_log(path)


def test_bytes_that_are_not_utf8_are_a_foreign_header_or_a_skipped_line(tmp_path):
    foreign = tmp_path / "foreign.csv"
    foreign.write_bytes(b"\xff\xfe\n")
    with refused(f"{foreign} is not a train-text log (its first line is not {CSV_HEADER})"):
        read_log(foreign)
    damaged = tmp_path / "run.csv"
    damaged.write_bytes(f"{CSV_HEADER}\n{LINE}\n".encode() + b"\xff,1\nnot a row\n")
    assert read_log(damaged) == (str(damaged), [ROW], 2)


def test_a_jsonl_foreign_file_is_refused_naming_the_columns(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"step": 1}\n')
    with refused(f"{path} is not a train-text log (its first line is not a JSON object of "
                 "step, seconds, train_loss, valid_loss, valid_bpc, chars_per_s, "
                 "learning_rate)"):
        read_log(path)


def test_read_log_follows_a_link_unless_told_not_to(tmp_path):
    target, link = a_log(tmp_path / "real.csv", LINE), tmp_path / "link.csv"
    link.symlink_to(target)
    assert read_log(link).rows == [ROW]
    with refused(f"{link} is a symbolic link; give its target as --log to log there"):
        read_log(link, follow=False)


def test_logs_that_cannot_be_read_or_used_say_why(tmp_path):
    missing, folder = tmp_path / "missing.csv", tmp_path / "folder.csv"
    folder.mkdir()
    with refused(f"cannot read {missing}: No such file or directory"):
        read_log(missing)
    with refused(f"{folder}: not a regular file (a folder)"):
        read_log(folder)
    below_a_file = a_log(tmp_path / "file.csv") / "run.csv"
    with refused(f"cannot use log {below_a_file}: Not a directory"):
        TrainingLog.open(below_a_file)


def test_each_refusal_of_an_existing_log_is_its_own_line(tmp_path, monkeypatch):
    link = tmp_path / "link.csv"
    link.symlink_to(a_log(tmp_path / "real.csv", LINE))
    with refused(f"the log {link} is a symbolic link; refusing to follow it (give --log with "
                 "its target to log there)"):
        TrainingLog.open(link, resumed_step=3, follow=False)
    taken = a_log(tmp_path / "taken.csv", LINE)
    with refused(f"the log {taken} holds another run's record (up to step 3); choose another "
                 "--log, continue that run with --resume, or pass --overwrite to start it "
                 "afresh"):
        TrainingLog.open(taken)
    one_byte = tmp_path / "one.csv"
    one_byte.write_text("x")
    with pytest.raises(LogError, match="is not a train-text log"):
        TrainingLog.open(one_byte)
    monkeypatch.setattr(os, "access", lambda *_: False)  # as a read-only file (root writes)
    with refused(f"cannot use log {taken}: the file is read-only"):
        TrainingLog.open(taken, resumed_step=3)


def test_a_new_log_is_made_readable_and_writable_by_all_the_umask_allows(tmp_path):
    path = tmp_path / "run.csv"
    assert TrainingLog.open(path).write(ROW) is None
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_link_to_another_log_planted_after_the_check_is_not_followed(tmp_path):
    path, victim = tmp_path / "run.csv", a_log(tmp_path / "victim.csv", LINE)
    log = TrainingLog.open(path, follow=False)
    path.symlink_to(victim)
    assert log.write(ROW) is not None and "Too many levels of symbolic links" in log.failed
    assert read_log(victim).rows == [ROW]


def failed_first_write(log: TrainingLog) -> str | None:
    assert log.write(ROW) is not None
    return log.failed


def test_a_file_changed_after_the_check_stops_the_log_in_its_own_words(tmp_path):
    fifo, foreign, garbled = (tmp_path / f"{name}.csv" for name in ("fifo", "foreign", "bytes"))
    logs = [TrainingLog.open(path) for path in (fifo, foreign, garbled)]
    os.mkfifo(fifo)
    foreign.write_text("precious\n")
    garbled.write_bytes(b"\xff\n")
    assert [failed_first_write(log) for log in logs] == [
        "it became a FIFO", "it is no longer a train-text log", "it is no longer a train-text log"]


@pytest.mark.parametrize(("written", "error"), [
    (3, "the row was cut short (a full disk?)"), (None, "No space left on device")])
def test_a_failed_write_keeps_the_reason_in_words(tmp_path, monkeypatch, written, error):
    log = TrainingLog.open(tmp_path / "run.csv")
    assert log.write(ROW) is None
    real = os.write

    def write(fd: int, data: bytes) -> int:
        if written is None:
            raise OSError(28, "No space left on device")
        return real(fd, data[:written])

    monkeypatch.setattr(os, "write", write)
    assert failed_first_write(log) == error


def test_a_closed_log_reopens_at_its_next_row(tmp_path):
    path = tmp_path / "run.csv"
    log = TrainingLog.open(path)
    assert log.write(ROW) is None
    log.close()
    assert log.write(ROW._replace(step=4)) is None
    log.close()
    assert [r.step for r in read_log(path).rows] == [3, 4]


def test_a_folder_not_writable_and_searchable_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "run.csv"
    monkeypatch.setattr(os, "access", lambda _, mode: mode != os.W_OK | os.X_OK)  # root writes
    with refused(f"cannot write log {path}: its folder is not writable"):
        TrainingLog.open(path)


def test_a_log_another_run_began_after_the_check_is_appended_to_not_emptied(tmp_path):
    path = tmp_path / "run.csv"
    log = TrainingLog.open(path)
    a_log(path, LINE)
    assert log.write(ROW._replace(step=4)) is None
    assert [r.step for r in read_log(path).rows] == [3, 4]


def test_a_named_log_through_a_dangling_link_makes_its_target(tmp_path):
    link, target = tmp_path / "link.csv", tmp_path / "target.csv"
    link.symlink_to(target)
    assert TrainingLog.open(link).write(ROW) is None
    assert read_log(target).rows == [ROW]
