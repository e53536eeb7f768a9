"""``dualtape.io``'s refusals in their own words and at their edges: extra values nested exactly
``JSON_DEPTH`` deep (one more is refused), a long header entry cut at exactly 200 characters,
and the messages that say what to do (generated mutants lived there)."""

from __future__ import annotations

import re
import zipfile

import numpy as np
import pytest

import dualtape
from dualtape.io import JSON_DEPTH, read_header

from . import test_io
from .test_io import header_of, read_archive, rewrite

path, saved = test_io.path, test_io.saved
"""``test_io``'s fixtures: a numpy network's file; a network of the backend and its file."""


def nested(levels: int, container: type) -> object:
    """``levels`` dicts (or lists) one inside the other around a 0."""
    value: object = 0
    for _ in range(levels):
        value = {"a": value} if container is dict else [value]
    return value


@pytest.mark.parametrize("container", [dict, list])
def test_extra_nested_json_depth_deep_saves_one_deeper_is_refused(saved, container):
    net, path = saved
    dualtape.save(net, path, extra={"deep": nested(JSON_DEPTH, container)})
    assert dualtape.load_extra(path)["deep"] == nested(JSON_DEPTH, container)
    before = path.read_bytes()
    with pytest.raises(TypeError, match=rf"^save: extra\['deep'\]\S* is nested more than "
                       rf"{JSON_DEPTH} lists or dicts deep \(or holds itself\)$"):
        dualtape.save(net, path, extra={"deep": nested(JSON_DEPTH + 1, container)})
    itself: dict = {}
    itself["again"] = itself
    with pytest.raises(TypeError, match=r"\(or holds itself\)$"):
        dualtape.save(net, path, extra={"loop": itself})
    assert path.read_bytes() == before


@pytest.mark.parametrize(("value", "message"), [
    ({1: "a"}, "extra['m'] has the key 1, which is not a string (JSON would turn it into one)"),
    ([np.zeros(2)], "extra['m'][0] is a numpy array, which is not JSON-able (arrays may only be "
     "top-level extra values; pass an optimizer as optimizer=)")])
def test_an_extra_value_json_cannot_hold_says_what_to_do(saved, value, message):
    net, path = saved
    with pytest.raises(TypeError) as info:
        dualtape.save(net, path, extra={"m": value})
    assert str(info.value) == f"save: {message}"


def test_another_networks_optimizer_is_named_as_such(saved):
    net, path = saved
    opt = dualtape.SGD(0.1, momentum=0.9)
    dualtape.train(dualtape.Network([dualtape.FullyConnected(3, 2, dtype="float64")]),
                   dualtape.asarray(np.ones((1, 3))), dualtape.asarray(np.ones((1, 2))), opt)
    with pytest.raises(ValueError, match=r"^save: the optimizer's state '0/W/\w+' \(2, 3\) fits "
                       r"no parameter of this network \(is it another network's optimizer\?\)$"):
        dualtape.save(net, path, optimizer=opt)


def test_a_file_without_optimizer_state_says_how_to_load_it(saved):
    _, path = saved
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: holds no optimizer state "
                       r"\(it was saved without optimizer=\); load it without optimizer=$"):
        dualtape.load(path, optimizer=dualtape.SGD(0.1))


def test_read_header_names_the_file_that_is_not_one(tmp_path):
    target = tmp_path / "other.zip"
    with zipfile.ZipFile(target, "w") as archive:
        archive.writestr("notes.txt", "not a network")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(target))}: not a dualtape file"):
        read_header(target)


@pytest.mark.parametrize("length", [200, 201])
def test_a_header_entry_is_quoted_whole_up_to_200_characters(path, length):
    """An unknown kind's entry is quoted as ``repr`` gives it up to 200 characters; a longer
    one (a hostile header's) is cut there, with ``...``."""
    arrays = read_archive(path)
    header = header_of(arrays)
    spec = {"kind": "x" * (length - len("{'kind': ''}"))}
    assert len(repr(spec)) == length
    rewrite(path, arrays, {**header, "layers": [spec, *header["layers"][1:]]})
    quoted = repr(spec) if length <= 200 else repr(spec)[:200] + "..."
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: layer 0 has an unknown "
                       rf"kind {re.escape(quoted)}; a layer class of your own loads once "):
        dualtape.load(path)
