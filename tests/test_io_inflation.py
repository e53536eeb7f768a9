"""load's bound on inflation: an honest archive whose members inflate more than 100-fold to
over 32 MiB (a 1 MB file of an 800 MB array of zeros) is refused before it is inflated, one
member or all of them together, unless ``max_inflation=None`` asks for it."""

from __future__ import annotations

import math
import re
import zipfile

import numpy as np
import pytest

import dualtape
from dualtape import zip_reader

from .helpers import deep_net
from .test_io_safety import assert_refused_without_inflating, replain

LIFTED = {"max_inflation": None}


def test_the_bound_is_the_documented_one():
    assert zip_reader.INFLATION_RATIO == 100 and zip_reader.INFLATION_FLOOR == 32 * 2**20


def test_a_member_that_would_inflate_past_the_ratio_is_refused_unless_asked_for(tmp_path):
    """The issue's file scaled down: a 42 MB weight of zeros deflated into a 41 kB file."""
    target = tmp_path / "zeros.npz"
    with dualtape.use_backend("numpy"):
        net = dualtape.Network([dualtape.FullyConnected(2048, 2560, dtype="float64")])
        net.params[0]["W"][...] = 0.0
        dualtape.save(net, target)
    replain(target, zipfile.ZIP_DEFLATED)
    size = 2048 * 2560 * 8 + 128  # the .npy member: its header and the zeros
    message = (f"^{re.escape(str(target))}: member 'layer0/W.npy' would inflate to {size:,} "
               r"bytes from [0-9,]+, more than 100-fold; refused unread \(load\(\.\.\., "
               r"max_inflation=None\) reads a file you trust\)$")
    assert_refused_without_inflating(target, message)
    for read in (dualtape.load_with_extra, dualtape.load_extra):
        with pytest.raises(ValueError, match=message):
            read(target)
    loaded = dualtape.load(target, backend="numpy", **LIFTED)
    assert not loaded.params[0]["W"].any() and loaded.params[0]["W"].shape == (2560, 2048)
    assert dualtape.load_with_extra(target, backend="numpy", **LIFTED)[1] == {}
    assert dualtape.load_extra(target, **LIFTED) == {}


def test_members_that_would_inflate_past_the_ratio_together_are_refused(tmp_path):
    """Two arrays of 20 MB, each under 32 MiB, together over it from a file of 50 kB."""
    target = tmp_path / "two.npz"
    zeros = {"a": np.zeros(2_500_000), "b": np.zeros(2_500_000)}
    dualtape.save(deep_net(), target, extra=zeros)
    replain(target, zipfile.ZIP_DEFLATED)
    assert_refused_without_inflating(target, f"^{re.escape(str(target))}: its members would "
                                             r"inflate to 4[0-9,]+ bytes from a file of "
                                             "[0-9,]+, more than 100-fold; refused unread")
    extra = dualtape.load_extra(target, **LIFTED)
    assert all(not extra[name].any() for name in zeros)


def test_a_member_over_32_mib_within_the_ratio_loads_and_a_lower_ratio_is_kept(tmp_path):
    """36 MB that deflate about 15-fold load as they are; ``max_inflation=10`` refuses them."""
    target = tmp_path / "runs.npz"
    runs = np.repeat(np.random.default_rng(0).normal(size=4_500_000 // 16), 16)
    dualtape.save(deep_net(), target, extra={"runs": runs})
    replain(target, zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(target) as archive:
        info = archive.getinfo("extra/runs.npy")
        ratio = info.file_size / info.compress_size
    assert info.file_size > zip_reader.INFLATION_FLOOR and 10 < ratio < 100, ratio
    np.testing.assert_array_equal(dualtape.load_extra(target)["runs"], runs)
    with pytest.raises(ValueError, match=r"member 'extra/runs.npy' would inflate .* more than "
                                         "10-fold"):
        dualtape.load_extra(target, max_inflation=10)


@pytest.mark.parametrize("value", ["100", 0.5, math.nan, True, -1])
def test_a_max_inflation_that_is_not_a_ratio_is_refused_in_one_line(tmp_path, value):
    target = tmp_path / "net.npz"
    dualtape.save(deep_net(), target)
    for read in (dualtape.load, dualtape.load_extra):
        with pytest.raises(ValueError, match=r"^load: max_inflation must be a real number in "
                                             r"\[1, inf\], got "):
            read(target, max_inflation=value)
