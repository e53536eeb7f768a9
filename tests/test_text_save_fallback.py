"""``TextTrainer.save_or_fall_back``'s tries, in this process, on a stand-in whose ``save``
fails as told: the names of the fallbacks, ``replace`` of each try, the warnings, and the
error naming every try. No arrays (``test_text_safety.py`` saves real checkpoints)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from dualtape.text.model import TextError
from dualtape.text.trainer import TextTrainer


class Saver:
    """What ``save_or_fall_back`` calls: ``step_count`` and a ``save`` failing ``fails`` times."""

    step_count = 7

    def __init__(self, fails: int) -> None:
        self.fails, self.tries = fails, []

    def save(self, path: Path, *, replace: bool = True) -> None:
        self.tries.append((path, replace))
        if len(self.tries) <= self.fails:
            raise TextError(f"cannot write checkpoint {path}: no room")


def fall_back(path: Path, fails: int) -> tuple[str, Saver, list[str]]:
    saver, warnings = Saver(fails), []
    where = TextTrainer.save_or_fall_back(saver, path, warnings.append)  # type: ignore[arg-type]
    return where, saver, warnings


def test_a_save_that_works_is_the_only_try(tmp_path):
    where, saver, warnings = fall_back(tmp_path / "run.npz", 0)
    assert where == str(tmp_path / "run.npz") and saver.tries == [(tmp_path / "run.npz", True)]
    assert warnings == []


def test_the_second_try_is_a_new_random_name_beside_it_never_replacing(tmp_path):
    where, saver, warnings = fall_back(tmp_path / "run", 1)  # no suffix: .npz
    (first, replace_first), (second, replace_second) = saver.tries
    assert replace_first is True and replace_second is False and where == str(second)
    assert re.fullmatch(r"run\.step7\.[0-9a-f]{8}\.npz", second.name) and second.parent == tmp_path
    assert warnings == [f"warning: cannot write checkpoint {first}: no room"]


def test_the_third_try_is_in_a_new_private_folder(tmp_path):
    where, saver, warnings = fall_back(tmp_path / "run.npz", 2)
    third, replace = saver.tries[2]
    assert replace is False and where == str(third) and third.name == "run.step7.npz"
    assert third.parent.name.startswith("dualtape-run.step7.")
    assert third.parent.parent == Path(tempfile.gettempdir()) and len(warnings) == 2
    third.parent.rmdir()


def test_when_every_try_fails_the_error_names_each_and_the_folder_goes(tmp_path):
    with pytest.raises(TextError) as info:
        fall_back(tmp_path / "run.npz", 3)
    message = str(info.value)
    assert message.endswith("no room; nothing was saved") and message.count("no room") == 3
    private = Path(message.split("; ")[2].removeprefix("cannot write checkpoint ").split(":")[0])
    assert private.name == "run.step7.npz" and not private.parent.exists()


def test_a_private_folder_that_cannot_be_made_is_named(tmp_path, monkeypatch):
    def refused(prefix: str) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    with pytest.raises(TextError, match=r"; cannot make a temporary folder: Permission denied; "
                                        r"nothing was saved$"):
        fall_back(tmp_path / "run.npz", 3)


def test_a_failed_try_that_leaves_a_file_in_the_private_folder_keeps_the_folder(tmp_path):
    class Leaving(Saver):
        def save(self, path: Path, *, replace: bool = True) -> None:
            if len(self.tries) == 2:
                path.write_bytes(b"half")  # a writer that leaves its file behind
            super().save(path, replace=replace)

    saver = Leaving(3)
    with pytest.raises(TextError, match="nothing was saved$"):
        TextTrainer.save_or_fall_back(saver, tmp_path / "run.npz", lambda _: None)  # type: ignore[arg-type]
    left = saver.tries[2][0]
    assert left.read_bytes() == b"half"
    left.unlink()
    left.parent.rmdir()
