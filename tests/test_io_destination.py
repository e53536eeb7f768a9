"""save against hostile destinations: modes, symlinks, read-only files, FIFOs and devices in the
way, no-clobber saves, durable renames, other writers' temporary files, kill -9, and the
train-text fallback when the final save fails."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dualtape
import dualtape.io
from dualtape import files
from dualtape.backend import resolve_backend
from dualtape.text import trainer as text_train
from dualtape.text.checkpoint import load_checkpoint
from dualtape.text.model import TextError
from dualtape.text.trainer import TextTrainer

from .helpers import deep_net
from .test_io import path
from .test_text import TEXT, TINY

__all__ = ["path"]  # the fixture shared with test_io


# --- the destination -------------------------------------------------------------------------


def test_save_keeps_the_destination_mode_and_new_files_follow_the_umask(path, tmp_path):
    path.chmod(0o640)
    dualtape.save(deep_net(), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    old = os.umask(0o027)
    try:
        dualtape.save(deep_net(), tmp_path / "new.npz")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.npz").stat().st_mode) == 0o640


def test_save_through_a_symlink_replaces_its_target(path, tmp_path):
    link = tmp_path / "latest.npz"
    link.symlink_to(path)
    dualtape.save(deep_net(), link, extra={"step": 7})
    assert link.is_symlink() and dualtape.load_extra(path)["step"] == 7


def test_save_refuses_a_read_only_destination(path):
    path.chmod(0o444)
    before = path.read_bytes()
    with pytest.raises(PermissionError, match="read-only") as info:
        dualtape.save(deep_net(), path)
    assert info.value.filename == str(path) and path.read_bytes() == before


@pytest.mark.parametrize("where, error, reason", [
    ("folder", IsADirectoryError, "it is a folder"), ("dot", IsADirectoryError, "it is a folder"),
    ("missing-folder", FileNotFoundError, "its folder does not exist"),
    ("file-as-folder", NotADirectoryError, "Not a directory"),
])
def test_save_errors_name_the_users_path(tmp_path, monkeypatch, where, error, reason):
    monkeypatch.chdir(tmp_path)
    Path("notes.txt").write_text("notes")
    given = {"folder": str(tmp_path), "dot": ".", "missing-folder": "no/such/net.npz",
             "file-as-folder": "notes.txt/net.npz"}[where]
    for replace in (True, False):
        with pytest.raises(error, match=reason) as info:
            dualtape.save(deep_net(), given, replace=replace)
        assert info.value.filename == given and str(given) in str(info.value)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_symlink_loop_is_refused_naming_the_path(tmp_path):
    loop = tmp_path / "loop.npz"
    loop.symlink_to(loop)
    with pytest.raises(OSError, match="Too many levels of symbolic links") as info:
        dualtape.save(deep_net(), loop)
    assert info.value.filename == str(loop)
    with pytest.raises(FileExistsError, match="replace=False never replaces"):
        dualtape.save(deep_net(), loop, replace=False)


def test_a_write_error_names_the_users_path_and_leaves_no_temporary_file(path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    with pytest.raises(OSError, match="No space left") as info:
        dualtape.save(deep_net(), path)
    assert info.value.filename == str(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["net.npz"]


def record_durability(monkeypatch) -> tuple[list[str], list[int]]:
    """What ``save`` does, in order: fsync of a file or a folder, rename, link; the bytes the
    operating system holds for a file when it is fsynced are in ``sizes``."""
    events, sizes = [], []
    real_fsync, real_replace, real_link = os.fsync, os.replace, os.link

    def fsync(fd):
        seen = os.fstat(fd)
        events.append("fsync folder" if stat.S_ISDIR(seen.st_mode) else "fsync file")
        if not stat.S_ISDIR(seen.st_mode):
            sizes.append(seen.st_size)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", lambda a, b: events.append("rename") or real_replace(a, b))
    monkeypatch.setattr(os, "link", lambda a, b: events.append("link") or real_link(a, b))
    return events, sizes


@pytest.mark.parametrize("replace", [True, False])
def test_the_data_reaches_the_disk_before_the_rename_and_the_rename_after(tmp_path,
                                                                          monkeypatch, replace):
    events, sizes = record_durability(monkeypatch)
    dualtape.save(deep_net(), tmp_path / "net.npz", replace=replace)
    assert events == ["fsync file", "rename" if replace else "link", "fsync folder"]
    assert sizes == [(tmp_path / "net.npz").stat().st_size]  # flushed before the fsync
    assert [p.name for p in tmp_path.iterdir()] == ["net.npz"]


def test_what_a_writer_leaves_in_python_s_buffer_is_flushed_before_the_fsync(tmp_path,
                                                                             monkeypatch):
    """``np.savez`` flushes by itself (zipfile does at close); a writer that does not must not
    leave its last bytes in Python's buffer while the file is fsynced."""
    _, sizes = record_durability(monkeypatch)
    files.write_atomically(tmp_path / "notes.bin", lambda f: f.write(b"12345"))
    assert sizes == [5] and (tmp_path / "notes.bin").read_bytes() == b"12345"


def test_a_fifo_destination_is_refused_and_left_in_place(tmp_path):
    fifo = tmp_path / "net.npz"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="it is a FIFO, not a regular file") as info:
        dualtape.save(deep_net(), fifo)  # check_destination never opens it
    assert info.value.filename == str(fifo) and stat.S_ISFIFO(os.lstat(fifo).st_mode)


# --- replace=False: never over a file, never through a link ---------------------------------


def test_no_clobber_save_writes_a_new_file_with_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        dualtape.save(deep_net(), tmp_path / "new.npz", replace=False, extra={"step": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.npz").stat().st_mode) == 0o640
    assert dualtape.load_extra(tmp_path / "new.npz")["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["new.npz"]


@pytest.mark.parametrize("what", ["file", "link-to-a-file", "dangling-link", "link-to-a-folder"])
def test_no_clobber_save_refuses_anything_at_the_destination(path, tmp_path, what):
    victim = tmp_path / "victim"
    target = tmp_path / "out.npz"
    if what == "file":
        target.write_bytes(b"precious")
    elif what == "link-to-a-folder":
        victim.mkdir()
        target.symlink_to(victim)
    else:
        if what == "link-to-a-file":
            victim.write_bytes(b"precious")
        target.symlink_to(victim)
    with pytest.raises(FileExistsError, match="replace=False never replaces") as info:
        dualtape.save(deep_net(), target, replace=False)
    assert info.value.filename == str(target)
    assert not target.is_symlink() or os.readlink(target) == str(victim)
    assert not victim.is_file() or victim.read_bytes() == b"precious"
    assert what == "link-to-a-folder" or not victim.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {"net.npz", "out.npz"} | ({"victim"} if what.startswith("link-to") else set()))


def test_a_link_planted_while_saving_is_neither_replaced_nor_followed(tmp_path, monkeypatch):
    victim = tmp_path / "bashrc"
    victim.write_text("precious")
    target = tmp_path / "model.step100.npz"
    real = np.savez

    def plant_then_write(f, **arrays):
        target.symlink_to(victim)  # an attacker racing the save
        real(f, **arrays)

    monkeypatch.setattr(np, "savez", plant_then_write)
    with pytest.raises(FileExistsError) as info:
        dualtape.save(deep_net(), target, replace=False)
    assert info.value.filename == str(target) and victim.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bashrc", "model.step100.npz"]


# --- other writers' temporary files ----------------------------------------------------------


def dead_pid() -> int:
    """The PID of a process that has exited."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(gone.stdout)


def dead_writer_prefix(name: str, writer: str | None = None, pid: int | None = None) -> str:
    """The start of the temporary file's name that a save of ``name`` by process ``pid``
    (default: one that has exited) of ``writer`` (default: this host) would leave."""
    stem = files._temporary_stem(name)
    ours = f"{stem}{files._writer()}.{os.getpid()}."
    assert files._temporary_prefix(name) == ours
    return f"{stem}{writer or files._writer()}.{pid or dead_pid()}."


def partial_archive(p: Path) -> Path:
    p.write_bytes(b"PK\x03\x04" + bytes(96))  # a save cut short by kill -9
    return p


def test_a_dead_writers_partial_archive_or_empty_file_is_removed(path):
    partial_archive(path.parent / f"{dead_writer_prefix('net.npz')}abc_1234")
    empty = path.parent / f"{dead_writer_prefix('net.npz')}zzzzzzzz"
    empty.write_bytes(b"")
    dualtape.save(deep_net(), path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["net.npz"]


def kept_files(folder: Path, **specs) -> dict[str, Path]:
    """Files named like temporaries of ``net.npz``, as ``name=(writer, pid, content)``."""
    made = {}
    for name, (writer, pid, content) in specs.items():
        made[name] = folder / f"{dead_writer_prefix('net.npz', writer, pid)}abcd_123"
        if content is None:
            partial_archive(made[name])
        else:
            made[name].write_bytes(content)
    return made


def test_temporary_files_not_provably_a_dead_writers_are_left(path):
    host = files._writer()
    kept = kept_files(
        path.parent,
        live=(None, os.getppid(), None),  # its writer still runs (or its PID was reused)
        this_process=(None, os.getpid(), None),
        other_host=("othernode+4026531836", None, None),  # NFS: PIDs there mean nothing here
        unknown_namespace=(host.split("+")[0], None, None),  # a host whose PID space is unknown
        not_an_archive=(None, None, b"my notes"),
    )
    legacy = partial_archive(path.parent / f".net.npz.{dead_pid()}.abc_1234")  # older versions
    backup = partial_archive(path.parent / ".net.npz.20241130")  # the user's own, or old tools'
    os.utime(backup, (0, 0))
    other_target = partial_archive(path.parent / f"{dead_writer_prefix('other.npz')}abcd_123")
    dualtape.save(deep_net(), path)
    assert all(p.exists() for p in [*kept.values(), legacy, backup, other_target])


def test_another_users_temporary_file_is_left(path, monkeypatch):
    stale = partial_archive(path.parent / f"{dead_writer_prefix('net.npz')}abc_1234")
    monkeypatch.setattr(os, "getuid", lambda: os.stat(stale).st_uid + 1)
    dualtape.save(deep_net(), path)
    assert stale.exists()


def test_a_process_of_another_user_counts_as_running(path, monkeypatch):
    stale = partial_archive(path.parent / f"{dead_writer_prefix('net.npz')}abc_1234")

    def not_permitted(pid, signal):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", not_permitted)
    dualtape.save(deep_net(), path)
    assert stale.exists()


def test_a_symlink_named_like_a_temporary_file_is_left_and_not_followed(path, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = partial_archive(elsewhere / "partial")
    link = path.parent / f"{dead_writer_prefix('net.npz')}abc_1234"
    link.symlink_to(target)
    dualtape.save(deep_net(), path)
    assert link.is_symlink() and target.exists()


@pytest.mark.parametrize("ours, dead", [(7, 2**31 - 1), (2**31 - 2, 3)], ids=["short", "long"])
def test_temporary_names_are_marked_and_fit_long_destination_names(tmp_path, monkeypatch,
                                                                   ours, dead):
    """Made-up process ids of 1 and 10 digits, so the real one (pytest's) does not matter."""
    monkeypatch.setattr(os, "getpid", lambda: ours)
    monkeypatch.setattr(files, "_process_runs", lambda pid: pid == ours)
    long_name = "é" * 123 + ".npz"  # 250 bytes: the temporary name must cut it (mid-letter)
    dualtape.save(deep_net(), tmp_path / long_name)
    prefix = files._temporary_prefix(long_name)
    assert ".dualtape-partial." in prefix and f".{ours}." in prefix
    assert len(os.fsencode(prefix)) + 8 <= 255
    stale = partial_archive(tmp_path / os.fsdecode(
        os.fsencode(dead_writer_prefix(long_name, pid=dead)) + b"abc_1234"))
    dualtape.save(deep_net(), tmp_path / long_name)
    assert not stale.exists() and [p.name for p in tmp_path.iterdir()] == [long_name]


KILLED_WHILE_SAVING = """
import os, signal, sys
import numpy as np
import dualtape

net = dualtape.Network([dualtape.FullyConnected(3, 2, seed=1, dtype="float64")])
dualtape.save(net, sys.argv[1], extra={"which": "old"})

def killed_while_writing(f, **arrays):
    f.write(b"PK\\x03\\x04" + bytes(200))
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)

np.savez = killed_while_writing
dualtape.save(net, sys.argv[1], extra={"which": "new"})
"""


def test_kill_9_while_saving_leaves_the_old_file_and_the_next_save_cleans_up(tmp_path):
    target = tmp_path / "net.npz"
    child = subprocess.run([sys.executable, "-c", KILLED_WHILE_SAVING, str(target)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert dualtape.load_extra(target)["which"] == "old"
    [left] = [p for p in tmp_path.iterdir() if p != target]
    assert re.fullmatch(re.escape(files._temporary_stem("net.npz") +
                                  files._writer()) + r"\.\d+\.[a-z0-9_]{8}", left.name)
    dualtape.save(deep_net(), target, extra={"which": "newer"})
    assert [p.name for p in tmp_path.iterdir()] == ["net.npz"]
    assert dualtape.load_extra(target)["which"] == "newer"


# --- train-text's fallback after a failed final save -----------------------------------------


def refuse_saves_to(monkeypatch, refused) -> list[tuple[str, bool]]:
    """``text_train.save`` fails for paths that ``refused`` accepts; the tries, as
    ``(path, replace)``."""
    real, tried = text_train.save, []

    def save(net, where, **kwargs):
        tried.append((str(where), kwargs.get("replace", True)))
        if refused(Path(where)):
            raise OSError(28, "No space left on device", str(where))
        real(net, where, **kwargs)

    monkeypatch.setattr(text_train, "save", save)
    return tried


def test_the_fallback_next_to_the_destination_has_a_random_name_and_clobbers_nothing(
        tmp_path, monkeypatch):
    target = tmp_path / "run.npz"
    tried = refuse_saves_to(monkeypatch, lambda p: p == target)
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    trainer.step_count = 100
    written = [trainer.save_or_fall_back(target, lambda message: None) for _ in range(2)]
    assert all(re.fullmatch(r"run\.step100\.[0-9a-f]{8}\.npz", Path(w).name) for w in written)
    assert written[0] != written[1] and all(Path(w).parent == tmp_path for w in written)
    assert [replace for _, replace in tried] == [True, False, True, False]
    assert load_checkpoint(written[0]).step == 100


def test_a_link_planted_at_the_fallback_name_is_not_followed(tmp_path, monkeypatch):
    target, victim = tmp_path / "run.npz", tmp_path / "bashrc"
    victim.write_text("precious")
    monkeypatch.setattr("secrets.token_hex", lambda n: "deadbeef")  # the attacker guessed it
    (tmp_path / "run.step0.deadbeef.npz").symlink_to(victim)
    refuse_saves_to(monkeypatch, lambda p: p == target)
    warnings = []
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    written = Path(trainer.save_or_fall_back(target, warnings.append))
    assert victim.read_text() == "precious" and "it exists" in warnings[1]
    assert written.name == "run.step0.npz" and written.parent.parent == Path(
        text_train.tempfile.gettempdir())
    assert stat.S_IMODE(written.parent.stat().st_mode) == 0o700
    assert load_checkpoint(written).step == 0
    written.unlink()
    written.parent.rmdir()


def test_when_every_fallback_fails_no_empty_private_folder_is_left(tmp_path, monkeypatch):
    target = tmp_path / "run.npz"
    tried = refuse_saves_to(monkeypatch, lambda p: True)
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    with pytest.raises(TextError, match="nothing was saved"):
        trainer.save_or_fall_back(target, lambda message: None)
    assert len(tried) == 3 and not Path(tried[2][0]).parent.exists()
    assert Path(tried[2][0]).parent.parent == Path(text_train.tempfile.gettempdir())
