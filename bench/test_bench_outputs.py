"""The files of ``dualtape bench`` and ``compare_devices.py``: written atomically after the
printed report; a write that fails (a full disk) leaves the old file, no temporary file, a line
on stderr and exit status 1."""

from __future__ import annotations

import errno
import json
import math
import os
import shlex
import stat

import pytest

from bench import compare_devices
from dualtape import files
from dualtape.benchmarks import output
from dualtape.benchmarks.cli import command_line
from dualtape.cli import build_parser, main

TINY = ["--quick", "--backends", "numpy", "--dtypes", "float64", "--workloads",
        "update/matrix-60x60", "--references", "none"]  # in the order the command is recorded
TABLE_ROW = "| update/matrix-60x60 | numpy | float64 |"


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch):
    """Every fsync fails as on a full disk."""
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output.os, "fsync", fsync)


def test_a_full_disk_keeps_the_old_files_and_says_which_were_not_written(capsys, tmp_path,
                                                                         full_disk):
    paths = {name: tmp_path / f"r.{name}" for name in ("json", "markdown")}
    for path in paths.values():
        path.write_text("old")
    status = main(["bench", *TINY, "--json", str(paths["json"]),
                   "--markdown", str(paths["markdown"])])
    out, err = capsys.readouterr()
    assert status == 1 and TABLE_ROW in out
    for name, path in paths.items():
        assert f"dualtape bench: --{name} {path} was not written: No space left on device" in err
        assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.markdown"]


def test_one_file_that_fails_does_not_keep_the_others_unwritten(capsys, tmp_path, monkeypatch):
    from dualtape.benchmarks import report

    def broken(path, results, meta):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(report, "write_json", broken)
    status = main(["bench", *TINY, "--json", str(tmp_path / "r.json"),
                   "--markdown", str(tmp_path / "r.md")])
    assert status == 1
    assert "--json" in capsys.readouterr().err and TABLE_ROW in (tmp_path / "r.md").read_text()


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left"), KeyboardInterrupt()],
                         ids=["full disk", "ctrl-c"])
def test_a_write_that_fails_halfway_leaves_the_old_file_and_no_temporary(tmp_path, failure):
    target = tmp_path / "r.json"
    target.write_text("old")

    def half(f):
        f.write(b'{"half": ')
        raise failure

    with pytest.raises(type(failure)):
        files.write_atomically(target, half)
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_a_replaced_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text("old")
    kept.chmod(0o640)
    files.write_atomically(kept, lambda f: f.write(b"new"))
    assert kept.read_text() == "new" and stat.S_IMODE(kept.stat().st_mode) == 0o640
    previous = os.umask(0o027)
    try:
        files.write_atomically(tmp_path / "new.json", lambda f: f.write(b"new"))
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640


def test_a_symlink_is_followed_and_stays_a_link(tmp_path):
    (tmp_path / "results").mkdir()
    link = tmp_path / "latest.json"
    link.symlink_to(tmp_path / "results" / "r.json")
    files.write_atomically(link, lambda f: f.write(b"new"))
    assert link.is_symlink() and (tmp_path / "results" / "r.json").read_text() == "new"


@pytest.mark.parametrize(("name", "magic"), [("r.svg", b"<?xml"), ("r.PNG", b"\x89PNG"),
                                             ("r.pdf", b"%PDF")])
def test_the_plot_is_in_the_format_its_name_says(capsys, tmp_path, name, magic):
    pytest.importorskip("matplotlib")
    assert main(["bench", *TINY, "--plot", str(tmp_path / name)]) == 0
    assert (tmp_path / name).read_bytes().startswith(magic)
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_the_json_file_is_complete_and_replaces_the_old_one(capsys, tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    assert main(["bench", *TINY, "--json", str(target)]) == 0
    record = json.loads(target.read_text())
    assert [r["workload"] for r in record["results"]] == ["update/matrix-60x60"]


def test_the_recorded_command_repeats_the_run(tmp_path):
    argv = ["bench", *TINY, "--references", "all", "--threads", "1",
            "--markdown", str(tmp_path / "a b.md")]
    line = command_line(build_parser().parse_args(argv))
    assert line.startswith("dualtape bench --quick --backends numpy --dtypes float64 ")
    assert "--references" not in line and "'" in line
    words = shlex.split(line)
    assert words[:2] == ["dualtape", "bench"]
    assert build_parser().parse_args(words[1:]) == build_parser().parse_args(argv)


def test_the_markdown_page_gives_the_command_that_wrote_it(capsys, tmp_path):
    page = tmp_path / "r.md"
    assert main(["bench", *TINY, "--markdown", str(page)]) == 0
    assert f"dualtape bench {' '.join(TINY)} --markdown {page}\n" in page.read_text()


# --- bench/compare_devices.py -----------------------------------------------------------------


def test_compare_devices_puts_its_sections_into_the_page_with_its_own_command(capsys, tmp_path,
                                                                             monkeypatch):
    for name in compare_devices.OPENBLAS_TUNING:
        monkeypatch.delenv(name, raising=False)
    page = tmp_path / "{date}.md"
    argv = [*TINY, "--rerun-without-openblas-env", "--markdown", str(page)]
    assert compare_devices.main(argv) == 0
    written = next(tmp_path.iterdir())
    assert written.name != page.name and written.name.endswith(".md")
    text = written.read_text()
    assert "python bench/compare_devices.py --quick" in text and f"'{page}'" in text
    assert "## Targets" in text and "nothing to re-run" in text
    assert text.count("## Targets") == 1 and text.index(TABLE_ROW) < text.index("## Targets")


def test_compare_devices_leaves_out_sections_not_asked_for(capsys):
    assert compare_devices.main(TINY) == 0
    out = capsys.readouterr().out
    assert "## Targets" in out and "OpenBLAS tuning variables" not in out


def test_compare_devices_exits_1_when_a_file_was_not_written(capsys, tmp_path, full_disk):
    assert compare_devices.main([*TINY, "--json", str(tmp_path / "r.json")]) == 1
    assert list(tmp_path.iterdir()) == []


def test_compare_devices_refuses_what_dualtape_bench_refuses(tmp_path):
    with pytest.raises(SystemExit, match="--json .*: its folder does not exist"):
        compare_devices.main([*TINY, "--json", str(tmp_path / "missing" / "{date}.json")])
    with pytest.raises(SystemExit, match="--threads must be auto, unset or"):
        compare_devices.main([*TINY, "--threads", "0", "--profile"])


def test_the_json_file_writes_a_number_that_is_not_finite_as_null(tmp_path):
    from dualtape.benchmarks.report import write_json

    class Row:
        def as_dict(self):
            return {"weights_max_abs_difference": math.nan, "samples": [1.0, math.inf]}

    write_json(str(tmp_path / "r.json"), [Row()], {"note": -math.inf})
    text = (tmp_path / "r.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"meta": {"note": None}, "results": [
        {"weights_max_abs_difference": None, "samples": [1.0, None]}]}
