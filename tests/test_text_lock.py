"""``text/lock.py`` called in this process (the command-line runs are in test_text_safety.py):
what is at the lock's name is never followed, truncated or kept; the lock file it writes."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from dualtape.text.lock import MARK, lock_checkpoint
from dualtape.text.model import TextError


def refused(checkpoint, lock, why: str) -> None:
    """``lock_checkpoint`` refuses ``checkpoint`` with the one line naming both paths and why."""
    with pytest.raises(TextError) as caught:
        lock_checkpoint(str(checkpoint))
    assert str(caught.value) == (f"cannot lock checkpoint {checkpoint}: {lock}: {why}; it was "
                                 "left as it is: move it away or choose another --save")


@pytest.mark.parametrize("kind", ["dangling link", "link to an empty file", "link to a lock"])
def test_a_link_at_the_lock_name_is_never_followed(tmp_path, kind):
    checkpoint, lock, target = tmp_path / "m.npz", tmp_path / "m.npz.lock", tmp_path / "t"
    if kind != "dangling link":
        target.write_text("" if kind.endswith("empty file") else "123\n")
    lock.symlink_to(target)
    refused(checkpoint, lock, "it is a symbolic link, not a regular file")
    assert os.path.lexists(lock) and os.path.islink(lock)
    assert target.exists() == (kind != "dangling link")  # not created through the link
    if target.exists():
        assert target.read_text() == ("" if kind.endswith("empty file") else "123\n")


def test_a_fifo_at_the_lock_name_is_refused_without_blocking(tmp_path):
    checkpoint, lock = tmp_path / "m.npz", tmp_path / "m.npz.lock"
    os.mkfifo(lock)
    refused(checkpoint, lock, "it is a FIFO, not a regular file")


def test_a_lock_file_is_written_with_the_holders_line_alone(tmp_path):
    checkpoint, lock = tmp_path / "m.npz", tmp_path / "m.npz.lock"
    lock.write_text(f"{MARK} {'9' * 20}\n")  # a longer line than this process's
    handle = lock_checkpoint(str(checkpoint))
    try:
        assert lock.read_text() == f"{MARK} {os.getpid()}\n"
        umask = os.umask(0)
        os.umask(umask)
    finally:
        handle.close()
    fresh = tmp_path / "n.npz"
    lock_checkpoint(str(fresh)).close()
    assert stat.S_IMODE(os.stat(f"{fresh}.lock").st_mode) == 0o666 & ~umask  # not executable


def test_a_foreign_file_of_any_bytes_is_refused_in_one_line(tmp_path):
    checkpoint, lock = tmp_path / "m.npz", tmp_path / "m.npz.lock"
    lock.write_bytes("# dépendances\n".encode() + b"\xff\xfe\n")  # not ASCII, not UTF-8
    refused(checkpoint, lock, "it is not a train-text lock file")
    assert lock.read_bytes().endswith(b"\xff\xfe\n")


def test_a_lock_file_that_cannot_be_opened_is_refused_saying_why(tmp_path, monkeypatch):
    checkpoint, lock = tmp_path / "m.npz", tmp_path / "m.npz.lock"
    lock.write_text("")

    def denied(*args, **kwargs):  # as for another user's file (the tests may run as root)
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(os, "open", denied)
    refused(checkpoint, lock, "Permission denied")


def test_a_held_lock_names_its_holder_or_unknown(tmp_path):
    checkpoint, lock = tmp_path / "m.npz", tmp_path / "m.npz.lock"
    handle = lock_checkpoint(str(checkpoint))
    try:
        with pytest.raises(TextError, match=rf"^checkpoint {checkpoint} is in use by another "
                           rf"train-text run \(PID {os.getpid()}, holding {lock}\); wait for it "
                           "to end or choose another --save$"):
            lock_checkpoint(str(checkpoint))
        os.truncate(lock, 0)
        with pytest.raises(TextError, match=r"\(PID unknown, "):
            lock_checkpoint(str(checkpoint))
    finally:
        handle.close()
