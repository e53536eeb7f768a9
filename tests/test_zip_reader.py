"""``zip_reader``'s bounds at their edges, called in this process (whole hostile files are in
test_io_safety.py and test_io_inflation.py): what is exactly at a limit is read, one byte past
it is refused, and each refusal says what it refuses."""

from __future__ import annotations

import io
import struct
import zipfile

import numpy as np
import pytest

from dualtape.zip_reader import (
    INFLATION_FLOOR,
    NPY_HEADER_LIMIT,
    Bounded,
    capacity,
    check_directory,
    check_inflation,
    read_member,
)


class Directory:
    """A zip directory of members of the given (file, compressed) sizes, deflated."""

    def __init__(self, *sizes: tuple[int, int]) -> None:
        self.infos = []
        for k, (file_size, compressed) in enumerate(sizes):
            info = zipfile.ZipInfo(f"m{k}.npy")
            info.compress_type = zipfile.ZIP_DEFLATED
            info.file_size, info.compress_size = file_size, compressed
            self.infos.append(info)

    def infolist(self) -> list[zipfile.ZipInfo]:
        return self.infos


def archive_of(**arrays: np.ndarray) -> zipfile.ZipFile:
    """An in-memory npz of ``arrays``, stored."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return zipfile.ZipFile(buffer)


def test_a_member_at_the_inflation_bound_is_read_one_byte_more_is_refused():
    at = Directory((INFLATION_FLOOR, 1))
    check_inflation(at, 10**9, "f", 100.0)
    with pytest.raises(ValueError, match=rf"^f: member 'm0.npy' would inflate to "
                       rf"{INFLATION_FLOOR + 1:,} bytes from 1, more than 100-fold"):
        check_inflation(Directory((INFLATION_FLOOR + 1, 1)), 10**9, "f", 100.0)
    check_inflation(Directory((40_000_000, 400_000)), 10**9, "f", 100.0)  # 100-fold, past the
    with pytest.raises(ValueError, match="would inflate to 40,000,001 bytes"):  # floor
        check_inflation(Directory((40_000_001, 400_000)), 10**9, "f", 100.0)


def test_members_at_the_total_bound_are_read_one_byte_more_is_refused():
    halves = (INFLATION_FLOOR // 2, INFLATION_FLOOR // 2)
    check_inflation(Directory(halves, halves), 1, "f", 100.0)
    with pytest.raises(ValueError, match=rf"^f: its members would inflate to "
                       rf"{INFLATION_FLOOR + 1:,} bytes from a file of 1, more than 100-fold"):
        check_inflation(Directory(halves, (INFLATION_FLOOR // 2 + 1, halves[1])), 1, "f", 100.0)


def test_compressed_sizes_that_fill_the_file_exactly_are_read():
    check_directory(Directory((10, 6), (10, 4)), 10, "f")
    with pytest.raises(ValueError, match="claim 11 compressed bytes in a file of 10"):
        check_directory(Directory((10, 7), (10, 4)), 10, "f")


def test_a_stored_member_holds_its_compressed_size_a_deflated_one_at_most_1032_times():
    stored = zipfile.ZipInfo("s")
    stored.compress_type, stored.compress_size = zipfile.ZIP_STORED, 10
    deflated = zipfile.ZipInfo("d")
    deflated.compress_type, deflated.compress_size = zipfile.ZIP_DEFLATED, 10
    assert (capacity(stored), capacity(deflated)) == (10, 10_320)


def test_a_bounded_stream_yields_what_it_allows_and_refuses_one_byte_more():
    assert Bounded(io.BytesIO(b"abcd"), 4).read() == b"abcd"
    reader = Bounded(io.BytesIO(b"abcd"), 4)
    assert reader.read(0) == b"" and reader.count == 0  # n = 0 reads nothing
    assert reader.read(3) == b"abc" and reader.read(-1) == b"d" and reader.count == 4
    with pytest.raises(ValueError, match="yields more than the 3 bytes its sizes allow"):
        Bounded(io.BytesIO(b"abcd"), 3).read()


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_member_exactly_at_its_limit_is_read_in_its_order(order):
    array = np.asarray(np.arange(6.0).reshape(2, 3), order=order)
    archive = archive_of(a=array)
    info = archive.getinfo("a.npy")
    found = read_member(archive, info, None, info.file_size - NPY_HEADER_LIMIT, "f")
    np.testing.assert_array_equal(found, array)
    with pytest.raises(ValueError, match=rf"^f: member 'a.npy' would inflate to "
                       rf"{info.file_size:,} bytes, more than the header declares "
                       rf"\({info.file_size - NPY_HEADER_LIMIT - 1:,}\); refused unread$"):
        read_member(archive, info, None, info.file_size - NPY_HEADER_LIMIT - 1, "f")


def test_a_member_of_objects_is_refused_saying_what_it_holds():
    archive = archive_of(a=np.array([None, 1], dtype=object))
    with pytest.raises(ValueError, match=r"^f: member 'a.npy' holds Python objects; dualtape "
                       "reads arrays of booleans, numbers and strings only; refused unread$"):
        read_member(archive, archive.getinfo("a.npy"), None, 10**6, "f")


def test_a_damaged_member_names_itself_and_the_reason():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }".ljust(117)
        archive.writestr("a.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + header + b"\n")
    archive = zipfile.ZipFile(buffer)
    with pytest.raises(ValueError, match=r"^f: not a dualtape file \(member 'a.npy' is "
                       r"unreadable: the shape \(-1,\) is not one of sizes >= 0\)$"):
        read_member(archive, archive.getinfo("a.npy"), None, 10**6, "f")
