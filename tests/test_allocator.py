"""``dualtape.allocator``: freed memory kept for the next step (glibc), and where it is not."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from dualtape import allocator, cli

ROOT = Path(__file__).resolve().parent.parent
GLIBC = platform.libc_ver()[0] == "glibc"

STEPS = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from dualtape.allocator import keep_freed_memory
    assert keep_freed_memory() is None
sizes = [2 << 20, 1 << 20, 512 << 10, 2 << 20, 3 << 20, 256 << 10] * 3  # a step's arrays
for _ in range(3):
    arrays = [np.ones(s // 8) for s in sizes]; del arrays
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    arrays = [np.ones(s // 8) for s in sizes]; del arrays
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


def faults_per_step(mode: str) -> float:
    """Page faults per round of a step-like pattern of allocations, in a fresh process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_kept_memory_takes_the_page_faults_out_of_each_step():
    plain, kept = faults_per_step("plain"), faults_per_step("keep")
    assert plain > 1000, "glibc's default returns these blocks (the check below could not fail)"
    assert kept < 50, (plain, kept)


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_on_glibc_it_is_set_and_said():
    assert allocator.keep_freed_memory() is None
    assert allocator.describe(None) == ("memory: freed blocks kept for reuse (glibc malloc: mmap "
                                        "threshold 32 MiB, trim threshold 64 MiB)")


def test_elsewhere_it_does_nothing_and_says_why(monkeypatch):
    monkeypatch.setattr(platform, "libc_ver", lambda: ("", ""))
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    allocator._set_thresholds.cache_clear()
    try:
        why = allocator.keep_freed_memory()
    finally:
        allocator._set_thresholds.cache_clear()
    assert why == "not glibc (Darwin)"
    assert allocator.describe(why) == "memory: the allocator's own behaviour (not glibc (Darwin))"


def test_a_refused_setting_is_reported(monkeypatch):
    class Libc:
        def __init__(self, name):
            self.mallopt = lambda option, value: 0

    monkeypatch.setattr(platform, "libc_ver", lambda: ("glibc", "2.36"))
    monkeypatch.setattr(allocator.ctypes, "CDLL", Libc)
    allocator._set_thresholds.cache_clear()
    try:
        why = allocator.keep_freed_memory()
    finally:
        allocator._set_thresholds.cache_clear()
    assert why == f"mallopt(M_MMAP_THRESHOLD, {32 << 20}) was refused"


def test_train_text_and_bench_say_what_memory_setting_they_run_under(capsys, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    assert cli.main(["train-text", str(corpus), "--hidden", "8", "--seq-len", "8", "--batch",
                     "2", "--steps", "1", "--seed", "4"]) == 0
    expected = allocator.describe(allocator.keep_freed_memory())
    assert expected in capsys.readouterr().out.splitlines()
    assert cli.main(["bench", "--quick", "--workloads", "train/one-time-step", "--backends",
                     "numpy", "--dtypes", "float64", "--references", "none"]) == 0
    assert f"- {expected}" in capsys.readouterr().out.splitlines()
