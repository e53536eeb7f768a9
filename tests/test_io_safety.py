"""save/load against hostile files and hostile destinations: bombs, foreign files, modes,
symlinks, read-only files, stale temporary files and errors that name the user's path."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

import dualtape
from dualtape.io import read_header

from .helpers import deep_net
from .test_io import header_of, read_archive, rewrite


@pytest.fixture
def path(tmp_path):
    """A numpy float64 network saved at ``tmp_path / "net.npz"``."""
    target = tmp_path / "net.npz"
    with dualtape.use_backend("numpy"):
        dualtape.save(deep_net(), target)
    return target


# --- what save refuses before writing --------------------------------------------------------


@pytest.mark.parametrize("value", [
    np.array([{"a": 1}], dtype=object),
    np.array([(1, None)], dtype=[("n", np.int64), ("anything", object)]),
], ids=["object", "record-with-object"])
def test_save_refuses_extra_arrays_load_cannot_read_and_keeps_the_old_file(path, value):
    before = path.read_bytes()
    with pytest.raises(TypeError, match="extra\\['bad'\\]"):
        dualtape.save(deep_net(), path, extra={"bad": value})
    assert path.read_bytes() == before


def test_extra_arrays_of_every_readable_kind_round_trip(tmp_path):
    values = {"flags": np.array([True, False]), "ids": np.arange(3, dtype=np.int16),
              "big": np.arange(4, dtype=np.uint64), "x": np.ones((2, 0, 3), np.float32),
              "big-endian": np.arange(3, dtype=">f8"), "kind": np.asarray("sgd"),
              "bytes": np.array([b"ab", b"c"]), "complex": np.array([1 + 2j])}
    dualtape.save(deep_net(), tmp_path / "x.npz", extra=values)
    loaded = dualtape.load_extra(tmp_path / "x.npz")
    for name, value in values.items():
        assert loaded[name].dtype == value.dtype
        np.testing.assert_array_equal(loaded[name], value)


# --- foreign and hostile files ---------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda p: p.write_text("just some notes\n" * 20),
    lambda p: p.write_bytes(open(sys.executable, "rb").read(4096)),
    lambda p: np.save(open(p, "wb"), np.array([{"evil": 1}], dtype=object)),
], ids=["text", "executable", "pickled-npy"])
def test_foreign_files_are_not_dualtape_files_and_pickle_is_never_mentioned(tmp_path, make):
    target = tmp_path / "foreign.npz"
    make(target)
    with pytest.raises(ValueError, match="not a dualtape file") as info:
        dualtape.load(target)
    assert str(target) in str(info.value) and "pickl" not in str(info.value)


@pytest.mark.parametrize("extra", [["a", "list"], "a string", 3])
def test_a_header_whose_extra_is_not_a_mapping_names_the_path(path, extra):
    arrays = read_archive(path)
    rewrite(path, arrays, {**header_of(arrays), "extra": extra})
    for read in (dualtape.load, dualtape.load_extra):
        with pytest.raises(ValueError, match="extra values are a") as info:
            read(path)
        assert str(path) in str(info.value)


def add_member(path, name: str, data: bytes, compress: int = zipfile.ZIP_DEFLATED) -> None:
    with zipfile.ZipFile(path, "a", compression=compress) as archive:
        archive.writestr(name, data)


def zeros_npy(nbytes: int, declared: int | None = None) -> bytes:
    """An .npy file of ``nbytes`` bytes of float64 zeros (compresses to almost nothing) whose
    header declares ``declared`` elements (default: what it holds)."""
    items = nbytes // 8 if declared is None else declared
    text = f"{{'descr': '<f8', 'fortran_order': False, 'shape': ({items},), }}"
    return b"\x93NUMPY\x01\x00" + b"v\x00" + text.ljust(117).encode() + b"\n" + bytes(nbytes)


def replace_first_weight(path, data: bytes, header: dict | None = None) -> None:
    """Rewrite the archive with the raw ``data`` as its ``layer0/W.npy`` member (and ``header``
    as its JSON header, if given)."""
    arrays = read_archive(path)
    del arrays["layer0/W"]
    rewrite(path, arrays, header)
    add_member(path, "layer0/W.npy", data)


def assert_refused_without_inflating(path, message: str) -> None:
    """``load`` raises ``message`` having allocated under 8 MiB (the bad member is 64 MiB)."""
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=message):
            dualtape.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20


def test_an_unknown_member_is_refused_unread(path):
    add_member(path, "junk.npy", zeros_npy(64 * 2**20))
    assert_refused_without_inflating(path, "'junk.npy' that the header does not declare")


def test_a_member_larger_than_its_header_entry_is_refused_before_inflating(path):
    replace_first_weight(path, zeros_npy(64 * 2**20))
    assert_refused_without_inflating(path, "'layer0/W.npy' would inflate to 67,108,992 bytes")


def test_an_npy_header_declaring_more_than_the_json_header_is_refused(path):
    # The zip entry is small; only the array's own header lies about its size.
    replace_first_weight(path, zeros_npy(120, declared=999_999_999))
    with pytest.raises(ValueError, match=r"\(5, 3\), found float64 \(999999999,\)"):
        dualtape.load(path)


def test_an_npy_header_declaring_more_than_its_zip_entry_holds_is_refused(path):
    # The JSON header allows a huge array, but the member holds 120 bytes: never allocate more.
    header = header_of(read_archive(path))
    header["layers"][0]["params"]["W"] = [10**6, 10**6]
    replace_first_weight(path, zeros_npy(120, declared=10**12), header)
    with pytest.raises(ValueError, match=r"\(5, 3\), found \[1000000, 1000000\] in the header"):
        dualtape.load(path)


def test_a_deeply_nested_header_is_not_a_dualtape_file(path):
    arrays = read_archive(path)
    arrays["__header__"] = np.frombuffer(b"[" * 200_000 + b"]" * 200_000, dtype=np.uint8)
    rewrite(path, arrays)
    with pytest.raises(ValueError, match="not a dualtape file"):
        dualtape.load(path)


def test_files_without_the_array_table_still_load_their_stored_extra_arrays(path):
    dualtape.save(deep_net(), path, extra={"momentum": np.arange(3.0)})
    arrays = read_archive(path)
    header = header_of(arrays)
    del header["arrays"]  # as written before the header declared its extra arrays
    rewrite(path, arrays, header)
    np.testing.assert_array_equal(dualtape.load_extra(path)["momentum"], np.arange(3.0))
    add_member(path, "extra/bomb.npy", zeros_npy(2**20))  # compressed: could inflate
    with pytest.raises(ValueError, match="does not declare"):
        dualtape.load_extra(path)


def test_an_extra_array_must_match_its_declaration(path):
    dualtape.save(deep_net(), path, extra={"momentum": np.arange(3.0)})
    arrays = read_archive(path)
    arrays["extra/momentum"] = np.arange(2.0)
    rewrite(path, arrays)
    with pytest.raises(ValueError, match="array extra/momentum should be float64 \\(3,\\)"):
        dualtape.load_extra(path)


def test_read_header_reads_no_array(path):
    assert read_header(path)["network"] == "Network"
    add_member(path, "junk.npy", b"never read")
    assert read_header(path)["format"] == "dualtape"


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


@pytest.mark.parametrize("where", ["folder", "dot", "missing-folder"])
def test_save_errors_name_the_users_path(tmp_path, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    given = {"folder": str(tmp_path), "dot": ".", "missing-folder": "no/such/net.npz"}[where]
    with pytest.raises(OSError) as info:
        dualtape.save(deep_net(), given)
    assert info.value.filename == given and str(given) in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_a_write_error_names_the_users_path_and_leaves_no_temporary_file(path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    with pytest.raises(OSError, match="No space left") as info:
        dualtape.save(deep_net(), path)
    assert info.value.filename == str(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["net.npz"]


def test_the_data_reaches_the_disk_before_the_rename(path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: events.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: events.append("replace") or real_replace(a, b))
    dualtape.save(deep_net(), path)
    assert events[:2] == ["fsync", "replace"]


def test_stale_temporary_files_of_the_same_target_are_removed(path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(gone.stdout)
    prefix = dualtape.io._temporary_prefix("net.npz")
    stale = path.parent / f"{prefix.replace(f'.{os.getpid()}.', f'.{dead}.')}abc_1234"
    live = path.parent / f"{prefix}abc_1234"
    users_own = path.parent / f".net.npz.{dead}.abc_1234"  # as older versions named them
    for p in (stale, live, users_own):
        p.write_bytes(path.read_bytes()[:100])  # a save cut short by kill -9
    dualtape.save(deep_net(), path)
    assert not stale.exists() and live.exists() and users_own.exists()
