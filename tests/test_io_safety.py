"""save/load against hostile files and hostile destinations: bombs, foreign files, modes,
symlinks, read-only files, stale temporary files and errors that name the user's path."""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import struct
import subprocess
import sys
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest

import dualtape
from dualtape.io import read_header

from .helpers import assert_params_equal, deep_net, host_params
from .test_io import header_of, path, read_archive, rewrite
from .test_io_destination import dead_writer_prefix

__all__ = ["path"]  # the fixture shared with test_io


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


def npy(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    """``array`` as the bytes of an ``.npy`` file (of format ``version``, if given)."""
    out = io.BytesIO()
    np.lib.format.write_array(out, array, version=version, allow_pickle=True)
    return out.getvalue()


def replace_first_weight(path, data: bytes, header: dict | None = None) -> None:
    """Rewrite the archive with the raw ``data`` as its ``layer0/W.npy`` member (and ``header``
    as its JSON header, if given)."""
    arrays = read_archive(path)
    del arrays["layer0/W"]
    rewrite(path, arrays, header)
    add_member(path, "layer0/W.npy", data)


def assert_refused_without_inflating(path, message: str, **options) -> None:
    """``load`` (given ``options``) raises ``message`` having allocated under 8 MiB (the bad
    member is 64 MiB)."""
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=message):
            dualtape.load(path, **options)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20


# These members would also inflate past load's ratio (test_io_inflation): max_inflation=None
# leaves them to the checks these tests are about.


def test_an_unknown_member_is_refused_unread(path):
    add_member(path, "junk.npy", zeros_npy(64 * 2**20))
    assert_refused_without_inflating(path, "'junk.npy' that the header does not declare",
                                     max_inflation=None)


def test_a_member_larger_than_its_header_entry_is_refused_before_inflating(path):
    replace_first_weight(path, zeros_npy(64 * 2**20))
    assert_refused_without_inflating(path, "'layer0/W.npy' would inflate to 67,108,992 bytes, "
                                           "more than the header declares",
                                     max_inflation=None)


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


def test_an_undeclared_stored_extra_member_is_refused_in_files_with_an_array_table(path):
    add_member(path, "extra/sneaked.npy", npy(np.arange(3.0)), zipfile.ZIP_STORED)
    with pytest.raises(ValueError, match="'extra/sneaked.npy' that the header does not declare"):
        dualtape.load_extra(path)


@pytest.mark.parametrize("value, what", [
    (np.array([{"a": 1}], dtype=object), "Python objects"),
    (np.zeros(2, dtype=[("a", "<f8")]), r"\[\('a', '<f8'\)\] values"),
    (np.zeros(2, dtype="datetime64[s]"), r"datetime64\[s\] values"),
], ids=["objects", "records", "datetimes"])
def test_old_files_extra_members_must_hold_booleans_numbers_or_strings(path, value, what):
    arrays = read_archive(path)
    header = header_of(arrays)
    del header["arrays"]
    rewrite(path, arrays, header)
    add_member(path, "extra/odd.npy", npy(value), zipfile.ZIP_STORED)
    with pytest.raises(ValueError, match=f"'extra/odd.npy' holds {what}; dualtape reads"):
        dualtape.load_extra(path)


# --- what the header may declare -------------------------------------------------------------


def header_changed(path, change) -> None:
    arrays = read_archive(path)
    header = header_of(arrays)
    change(header)
    rewrite(path, arrays, header)


def test_the_headers_parameter_shapes_must_be_the_layers_own(path):
    header_changed(path, lambda h: h["layers"][0]["params"].update(W=[3, 5]))
    with pytest.raises(ValueError, match=r"layer 0 \(FullyConnected\(3, 5\)\) parameter W should "
                                         r"be float64 \(5, 3\), found \[3, 5\] in the header"):
        dualtape.load(path)


def test_a_header_may_not_declare_parameters_a_layer_does_not_have(path):
    header_changed(path, lambda h: h["layers"][0]["params"].update(Z=[2]))
    add_member(path, "layer0/Z.npy", npy(np.zeros(2)))
    with pytest.raises(ValueError, match=r"layer 0 .* declares the parameters .*'Z'"):
        dualtape.load(path)


@pytest.mark.parametrize("name, spec", [
    ("layer0/W", {"dtype": "<i8", "shape": [5, 3]}),
    ("extra/objects", {"dtype": "|O", "shape": [1]}),
    ("extra/negative", {"dtype": "<f8", "shape": [-1]}),
], ids=["redeclares-a-parameter", "objects", "negative-size"])
def test_the_array_table_declares_only_readable_extra_arrays(path, name, spec):
    header_changed(path, lambda h: h["arrays"].update({name: spec}))
    if name == "layer0/W":  # and the member agrees with the table: it must still be refused
        replace_first_weight(path, npy(np.zeros((5, 3), np.int64)))
    with pytest.raises(ValueError, match=f"declares an invalid array {name}"):
        dualtape.load(path)


def test_a_fortran_ordered_or_npy_2_member_reads_as_written(path):
    weight = np.asfortranarray(np.arange(15.0).reshape(5, 3))
    replace_first_weight(path, npy(weight, version=(2, 0)))
    loaded = dualtape.load(path, backend="numpy")
    np.testing.assert_array_equal(loaded.params[0]["W"], weight)


def test_npy_format_3_members_are_refused(path):
    replace_first_weight(path, npy(np.zeros((5, 3)), version=(3, 0)))
    with pytest.raises(ValueError, match=r"'layer0/W.npy' is unreadable: npy version \(3, 0\)"):
        dualtape.load(path)


def test_a_header_member_claiming_a_terabyte_is_refused_without_allocating(path):
    arrays = read_archive(path)
    del arrays["__header__"]
    rewrite(path, arrays)
    add_member(path, "__header__.npy", zeros_npy(100, declared=10**15 // 8))  # no memory has it
    with pytest.raises(ValueError, match="declares 1,000,000,000,000,000 bytes .* holds 100 b"):
        read_header(path)


# --- damaged zip fields ----------------------------------------------------------------------


def replain(path, method: int = zipfile.ZIP_STORED, **methods: int) -> None:
    """Rewrite the archive without zip64 fields (as zipfile writes small members), each member
    compressed with ``method`` or ``methods[name]`` (``layer0/W`` as ``layer0_W``)."""
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            key = name.removesuffix(".npy").replace("/", "_")
            archive.writestr(name, data, compress_type=methods.get(key, method))


def patch(path, member: str, central: dict[int, tuple[str, int]] | None = None,
          local: dict[int, tuple[str, int]] | None = None) -> None:
    """Overwrite fields (offset: (struct format, value)) of ``member``'s central directory
    entry and of its local header."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        start = archive.getinfo(member).header_offset
    entry = next(i for i in range(len(data)) if data[i:i + 4] == b"PK\x01\x02"
                 and data[i + 46:i + 46 + len(member)] == member.encode())
    for base, fields in ((entry, central or {}), (start, local or {})):
        for offset, (fmt, value) in fields.items():
            struct.pack_into("<" + fmt, data, base + offset, value)
    path.write_bytes(bytes(data))


CENTRAL_METHOD, LOCAL_METHOD, CENTRAL_FLAGS, CENTRAL_VERSION = 10, 8, 8, 6
CENTRAL_CSIZE, CENTRAL_USIZE = 20, 24


def first_weight_data_offset(path) -> int:
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("layer0/W.npy")
    data = path.read_bytes()
    names, extras = struct.unpack_from("<HH", data, info.header_offset + 26)
    return info.header_offset + 30 + names + extras


def method(value: int):
    return lambda p: patch(p, "layer0/W.npy", {CENTRAL_METHOD: ("H", value)},
                           {LOCAL_METHOD: ("H", value)})


def flags(value: int):
    return lambda p: patch(p, "layer0/W.npy", {CENTRAL_FLAGS: ("H", value)})


def flip_data_byte(p):
    data = bytearray(p.read_bytes())
    data[first_weight_data_offset(p) + 130] ^= 0x40
    p.write_bytes(bytes(data))


def local_name_differs(p):
    data = bytearray(p.read_bytes())
    with zipfile.ZipFile(p) as archive:
        start = archive.getinfo("layer0/W.npy").header_offset
    data[start + 30] = ord("X")
    p.write_bytes(bytes(data))


def sizes(csize: int | None = None, usize: int | None = None):
    def edit(p):
        with zipfile.ZipFile(p) as archive:
            info = archive.getinfo("layer0/W.npy")
        patch(p, "layer0/W.npy", {CENTRAL_CSIZE: ("I", info.compress_size + (csize or 0)),
                                  CENTRAL_USIZE: ("I", info.file_size + (usize or 0))})

    return edit


def truncated_deflate_stream(p):
    """The member's compressed bytes end early; every size field agrees with what is there."""
    with zipfile.ZipFile(p) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    squeezed = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = squeezed.compress(members["layer0/W.npy"]) + squeezed.flush()
    with zipfile.ZipFile(p, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, stream[:len(stream) // 2] if name == "layer0/W.npy" else data)
    patch(p, "layer0/W.npy", {CENTRAL_METHOD: ("H", 8), CENTRAL_USIZE: ("I", 248)},
          {LOCAL_METHOD: ("H", 8)})


def duplicate_member(p):
    with zipfile.ZipFile(p, "a") as archive, pytest.warns(UserWarning, match="Duplicate"):
        archive.writestr("layer0/W.npy", npy(np.ones((5, 3))))


def trailing_bytes(p):
    replace_first_weight(p, npy(np.zeros((5, 3))) + b"junk")
    replain(p)


WHOLE_ARCHIVE = [  # the zip directory: refused on opening, by read_header too
    pytest.param(method(99), "uses compression method 99; only stored and deflate",
                 id="unknown-method"),
    pytest.param(method(zipfile.ZIP_BZIP2), "compression method 12", id="bzip2"),
    pytest.param(flags(0x1), "'layer0/W.npy' is encrypted", id="encrypted"),
    pytest.param(flags(0x20), "'layer0/W.npy' is encrypted or patched", id="patched-data"),
    pytest.param(lambda p: patch(p, "layer0/W.npy", {CENTRAL_VERSION: ("H", 148)}),
                 "zip file version 14.8", id="needs-a-newer-zip"),
    pytest.param(sizes(usize=-10), "claims 238 bytes from 248 compressed bytes",
                 id="stored-shorter-than-its-data"),
    pytest.param(sizes(csize=10**6, usize=10**6), "claim 1,00.,... compressed bytes in a file "
                 "of", id="sizes-beyond-the-file"),
    pytest.param(duplicate_member, "'layer0/W.npy' appears twice", id="duplicate-member"),
]
ONE_MEMBER = [  # found when that member is read
    pytest.param(flip_data_byte, "Bad CRC-32", id="bad-crc"),
    pytest.param(local_name_differs, "File name in directory", id="local-header-disagrees"),
    pytest.param(truncated_deflate_stream, "'layer0/W.npy' is unreadable",
                 id="truncated-deflate-stream"),
    pytest.param(trailing_bytes, "'layer0/W.npy' declares 120 bytes of <f8, but it holds 124",
                 id="bytes-after-the-array"),
]


def assert_one_line_value_error(read, path, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        read(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("damage, message", WHOLE_ARCHIVE)
def test_a_damaged_zip_directory_is_a_one_line_value_error_naming_the_path(path, damage,
                                                                           message):
    replain(path)
    damage(path)
    for read in (dualtape.load, dualtape.load_extra, read_header):
        assert_one_line_value_error(read, path, message)


@pytest.mark.parametrize("damage, message", ONE_MEMBER)
def test_a_damaged_member_is_a_one_line_value_error_naming_the_path(path, damage, message):
    replain(path)
    damage(path)
    for read in (dualtape.load, dualtape.load_extra):
        assert_one_line_value_error(read, path, message)
    assert read_header(path)["format"] == "dualtape"  # the header member is intact


def test_a_deflated_member_may_not_claim_more_than_deflate_can_produce(path):
    replain(path, zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("layer0/W.npy")
    ratio = dualtape.zip_reader.DEFLATE_RATIO
    patch(path, "layer0/W.npy", {CENTRAL_USIZE: ("I", ratio * info.compress_size + 1)})
    with pytest.raises(ValueError, match=f"claims {ratio * info.compress_size + 1:,} bytes "
                                         f"from {info.compress_size} compressed"):
        dualtape.load(path)


def test_honestly_compressed_files_load(tmp_path):
    net = dualtape.Network([dualtape.FullyConnected(300, 300, dtype="float64")])
    net.params[0]["W"][...] = 0.0  # compresses about 1000:1
    target = tmp_path / "big.npz"
    dualtape.save(net, target)
    replain(target, zipfile.ZIP_DEFLATED)
    assert target.stat().st_size * 100 < 300 * 300 * 8
    np.testing.assert_array_equal(dualtape.load(target, backend="numpy").params[0]["W"], 0.0)


# --- what an archive can honestly hold -------------------------------------------------------


def test_a_header_declaring_more_than_the_members_can_hold_is_refused_before_any_is_read(path):
    # The tester's bomb, scaled down: a 5 kB file whose header declares a 40 MB weight, its
    # member 4 MiB of zeros deflated to 4 kB (3 MB and 3 GB made load inflate 3 GB).
    header = header_of(read_archive(path))
    header["layers"][0].update(config={"n_in": 10**6, "n_out": 5},
                               params={"W": [5, 10**6], "b": [5]})
    header["layers"][2]["config"]["n_in"] = 5
    replace_first_weight(path, zeros_npy(4 * 2**20), header)
    assert_refused_without_inflating(path, "declares [0-9,]+ bytes of arrays, more than this "
                                           "file's members can hold")


def test_stored_members_can_hold_only_their_own_size(path):
    # 720 kB declared in a 5 kB stored file: deflate could produce it, a stored member cannot.
    header = header_of(read_archive(path))
    header["layers"][8].update(config={"n_in": 300, "n_out": 300},
                               params={"W": [300, 300], "b": [300]})
    arrays = read_archive(path)
    rewrite(path, arrays, header)
    with pytest.raises(ValueError, match="more than this file's members can hold"):
        dualtape.load(path)


# --- the bounded reader ----------------------------------------------------------------------


def test_the_member_reader_never_yields_more_than_allowed():
    reader = dualtape.zip_reader.Bounded(io.BytesIO(b"x" * 11), 10)
    assert reader.read(4) == b"xxxx" and reader.count == 4
    with pytest.raises(ValueError, match="more than the 10 bytes its sizes allow"):
        reader.read(100)
    exact = dualtape.zip_reader.Bounded(io.BytesIO(b"x" * 10), 10)
    assert exact.read(100) == b"x" * 10 and exact.read(1) == b""


class ReadOnceAtTheEnd(io.BytesIO):
    """A stream that fails a test reading it again after it said it had ended."""

    def read(self, n: int = -1) -> bytes:
        data = super().read(n)
        assert data or not getattr(self, "ended", False), "read again after the end"
        self.ended = not data
        return data


def test_array_data_that_ends_early_is_an_error_not_an_endless_loop():
    reader = dualtape.zip_reader.Bounded(ReadOnceAtTheEnd(bytes(12)), 100)
    with pytest.raises(EOFError, match="ends after 12 of 16 bytes"):
        dualtape.zip_reader.npy_data(reader, (2,), False, np.dtype("<f8"))


# --- files that are not regular files (in a child process: a bug would block or fill memory) --

SPECIAL_CALLS = """
import json, sys
import dualtape
from dualtape.files import check_destination
from dualtape.io import read_header

calls = {"load": dualtape.load, "load_extra": dualtape.load_extra,
         "load_with_extra": dualtape.load_with_extra, "read_header": read_header,
         "check_destination": check_destination,
         "save": lambda p: dualtape.save(dualtape.Network([dualtape.Tanh()]), p)}
for name, path in json.loads(sys.argv[1]):
    try:
        calls[name](path)
        print(json.dumps([name, path, None, ""]), flush=True)
    except Exception as exc:
        print(json.dumps([name, path, type(exc).__name__, str(exc)]), flush=True)
"""
READS = ["load", "load_extra", "load_with_extra", "read_header"]


def limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))


def call_in_a_child(jobs: list[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, str]]:
    """``(exception type, message)`` of each ``(call, path)``, run in a child process with 4 GiB
    of address space, which must finish within a minute (a blocked call never would)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", SPECIAL_CALLS, json.dumps(jobs)],
                              capture_output=True, text=True, timeout=60, env=env,
                              preexec_fn=limit_memory)
    except subprocess.TimeoutExpired as exc:
        finished = (exc.stdout or b"").decode().count("\n")
        pytest.fail(f"{jobs[finished]} blocked (still running after a minute)")
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == len(jobs), done.stderr
    return {(name, path): (kind, message) for name, path, kind, message in lines}


@pytest.fixture(scope="module")
def special_files(tmp_path_factory):
    """A FIFO, a socket, a link to /dev/zero, /dev/zero itself, and a FIFO named like a dead
    writer's temporary file next to ``model.npz``, and what each call gave for them."""
    folder = tmp_path_factory.mktemp("special")
    os.mkfifo(folder / "pipe.npz")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "sock.npz"))
    (folder / "zero.npz").symlink_to("/dev/zero")
    stale = folder / f"{dead_writer_prefix('model.npz')}abcd1234"
    os.mkfifo(stale)
    sources = [str(folder / n) for n in ("pipe.npz", "sock.npz", "zero.npz")] + ["/dev/zero"]
    jobs = [(call, source) for source in sources for call in READS]
    jobs += [("check_destination", str(folder / n)) for n in ("pipe.npz", "sock.npz")]
    jobs += [("check_destination", "/dev/null"), ("save", str(folder / "pipe.npz")),
             ("save", str(folder / "model.npz"))]
    try:
        yield folder, stale, call_in_a_child(jobs)
    finally:
        server.close()


@pytest.mark.parametrize("name, kind", [("pipe.npz", "a FIFO"), ("sock.npz", "a socket"),
                                        ("zero.npz", "a character device"),
                                        ("/dev/zero", "a character device")])
@pytest.mark.parametrize("call", READS)
def test_reading_anything_but_a_regular_file_is_refused_without_blocking(special_files, call,
                                                                         name, kind):
    folder, _, results = special_files
    source = name if name.startswith("/") else str(folder / name)
    assert results[call, source] == ("ValueError", f"{source}: not a regular file ({kind}); "
                                                   "networks load only from regular files")


@pytest.mark.parametrize("name, kind", [("pipe.npz", "a FIFO"), ("sock.npz", "a socket"),
                                        ("/dev/null", "a character device")])
def test_a_destination_that_is_not_a_regular_file_is_refused(special_files, name, kind):
    folder, _, results = special_files
    target = name if name.startswith("/") else str(folder / name)
    assert results["check_destination", target] == (
        "OSError", f"[Errno 22] it is {kind}, not a regular file: '{target}'")


def test_save_onto_a_fifo_is_refused_and_leaves_it(special_files):
    folder, _, results = special_files
    kind, message = results["save", str(folder / "pipe.npz")]
    assert kind == "OSError" and "it is a FIFO" in message
    assert stat.S_ISFIFO(os.lstat(folder / "pipe.npz").st_mode)


def test_a_fifo_named_like_a_stale_temporary_file_neither_blocks_save_nor_is_removed(
        special_files):
    folder, stale, results = special_files
    assert results["save", str(folder / "model.npz")] == (None, "")
    assert stat.S_ISFIFO(os.lstat(stale).st_mode)
    assert dualtape.load(folder / "model.npz").layers[0].kind == "Tanh"


def test_a_folder_is_not_a_network_file_and_a_link_to_one_is_followed(path, tmp_path):
    with pytest.raises(ValueError, match="not a regular file \\(a folder\\)"):
        dualtape.load(tmp_path)
    link = tmp_path / "link.npz"
    link.symlink_to(path)
    assert read_header(link)["network"] == "Network" and dualtape.load(link).layers


# --- fuzzing ---------------------------------------------------------------------------------


def damaged(data: bytes, rng: np.random.Generator) -> bytes:
    """``data`` with a few bits flipped, a zip field set to an extreme, a span replaced, or the
    end cut off."""
    out = bytearray(data)
    how = rng.integers(4)
    if how == 0:
        for _ in range(rng.integers(1, 4)):
            out[rng.integers(len(out))] ^= 1 << int(rng.integers(8))
    elif how == 1:  # a 2- or 4-byte field of a local header or directory entry
        signatures = [i for i in range(len(out) - 4) if out[i:i + 2] == b"PK"]
        at = int(rng.choice(signatures)) + int(rng.integers(4, 46))
        width = int(rng.choice([2, 4]))
        value = int(rng.choice([0, 1, 8, 12, 99, 2**16 - 1, 2**32 - 1, rng.integers(2**16)]))
        out[at:at + width] = (value % 2 ** (8 * width)).to_bytes(width, "little")
    elif how == 2:
        at = rng.integers(len(out))
        out[at:at + int(rng.integers(1, 40))] = rng.bytes(int(rng.integers(1, 40)))
    else:
        del out[rng.integers(len(out)):]
    return bytes(out)


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED],
                         ids=["stored", "deflated"])
def test_damaged_files_load_as_saved_or_raise_a_one_line_value_error(path, method):
    dualtape.save(deep_net(), path, extra={"momentum": np.arange(5.0), "epoch": 3})
    replain(path, method)
    good, expected = path.read_bytes(), host_params(dualtape.load(path, backend="numpy"))
    rng = np.random.default_rng(17 + method)
    outcomes = set()
    tracemalloc.start()
    try:
        for _ in range(200):
            path.write_bytes(damaged(good, rng))
            tracemalloc.reset_peak()
            try:
                assert_params_equal(host_params(dualtape.load(path, backend="numpy")), expected)
                outcomes.add("loaded")
            except ValueError as exc:
                assert str(path) in str(exc) and "\n" not in str(exc)
                outcomes.add("refused")
            assert tracemalloc.get_traced_memory()[1] < 8 * 2**20
    finally:
        tracemalloc.stop()
    assert outcomes == {"loaded", "refused"}
