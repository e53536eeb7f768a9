"""The rule for a numba disk cache folder, and a file in it, safe to load compiled code from."""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import pytest

from dualtape.kernels.cache_folder import entry_problem, file_problem, path_problem, private_group

ME, SOMEONE, ROOT, MINE, SHARED = 1000, 2000, 0, 1000, 50
DIR, LINK = stat.S_IFDIR, stat.S_IFLNK

CASES = [  # mode, owner, group, the user, their private group, the cache folder itself, refused
    pytest.param(DIR | 0o700, ME, MINE, ME, MINE, True, None, id="yours-0700"),
    pytest.param(DIR | 0o755, ME, MINE, ME, MINE, True, None, id="yours-0755"),
    pytest.param(DIR | 0o755, ROOT, ROOT, ME, MINE, False, None, id="roots-0755-above"),
    pytest.param(DIR | 0o755, SOMEONE, SOMEONE, ME, MINE, True, "owned by uid 2000",
                 id="someone-elses"),
    pytest.param(DIR | 0o700, SOMEONE, SOMEONE, ME, MINE, False, "owned by uid 2000",
                 id="someone-elses-0700-above"),
    pytest.param(DIR | 0o1777, SOMEONE, SOMEONE, ME, MINE, False, "owned by uid 2000",
                 id="someone-elses-sticky-above"),
    pytest.param(DIR | 0o755, ME, MINE, ROOT, ROOT, True, "owned by uid 1000",
                 id="root-refuses-a-users"),
    pytest.param(DIR | 0o1777, ROOT, ROOT, ME, MINE, False, None, id="tmp-above"),
    pytest.param(DIR | 0o1777, ROOT, ROOT, ME, MINE, True, "written by anyone",
                 id="tmp-itself"),
    pytest.param(DIR | 0o777, ME, MINE, ME, MINE, False, "written by anyone (mode 0777)",
                 id="yours-world-writable-above"),
    pytest.param(DIR | 0o777, ME, MINE, ME, MINE, True, "written by anyone",
                 id="yours-world-writable"),
    pytest.param(DIR | 0o1777, ME, MINE, ME, MINE, False, None, id="yours-sticky-above"),
    pytest.param(DIR | 0o1777, ME, MINE, ME, MINE, True, "written by anyone",
                 id="yours-sticky"),
    pytest.param(DIR | 0o775, ME, MINE, ME, MINE, True, None, id="your-private-group"),
    pytest.param(DIR | 0o775, ME, SHARED, ME, MINE, True, "written by group 50",
                 id="a-shared-group"),
    pytest.param(DIR | 0o775, ME, MINE, ME, None, False, "written by group 1000",
                 id="a-group-not-yours-alone-above"),
    pytest.param(DIR | 0o3775, ME, SHARED, ME, MINE, False, None,
                 id="a-shared-group-sticky-above"),
    pytest.param(DIR | 0o757, ME, MINE, ME, MINE, True, "written by anyone (mode 0757)",
                 id="others-write-without-group"),
    pytest.param(LINK | 0o777, ME, MINE, ME, MINE, False, None, id="your-link"),
    pytest.param(LINK | 0o777, ROOT, ROOT, ME, MINE, False, None, id="roots-link"),
    pytest.param(LINK | 0o777, SOMEONE, SOMEONE, ME, MINE, False, "owned by uid 2000",
                 id="someone-elses-link"),
]


@pytest.mark.parametrize("mode, owner, group, uid, private, holds_files, refused", CASES)
def test_the_rule_for_each_kind_of_folder(mode, owner, group, uid, private, holds_files,
                                          refused):
    problem = entry_problem(mode, owner, group, uid, private, holds_files)
    if refused is None:
        assert problem is None
    else:
        assert problem is not None and refused in problem


posix_only = pytest.mark.skipif(os.name != "posix", reason="modes and owners are POSIX's")


@pytest.fixture
def folders(tmp_path):
    """``tmp_path`` (yours, 0700 under pytest's own folder) made of the kinds of folder."""
    for name, mode in {"mine": 0o755, "open": 0o777, "sticky": 0o1777}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name).chmod(mode)
        (tmp_path / name / "cache").mkdir(mode=0o755)
    (tmp_path / "link").symlink_to(tmp_path / "open")
    (tmp_path / "safe-link").symlink_to(tmp_path / "mine")
    return tmp_path


@posix_only
def test_a_folder_of_yours_under_tmp_is_safe(folders):
    assert path_problem(str(folders / "mine" / "cache")) is None
    assert path_problem(str(folders / "mine")) is None


@posix_only
def test_a_world_writable_folder_refuses_itself_and_what_is_under_it(folders):
    assert path_problem(str(folders / "open")) == f"{folders / 'open'} can be written by " \
        "anyone (mode 0777)"
    assert path_problem(str(folders / "open" / "cache")).startswith(f"{folders / 'open'} ")


@posix_only
def test_a_sticky_folder_protects_what_is_under_it_but_not_itself(folders):
    assert path_problem(str(folders / "sticky" / "cache")) is None
    assert "mode 1777" in path_problem(str(folders / "sticky"))


@posix_only
def test_links_are_followed_to_the_folders_they_name(folders):
    assert path_problem(str(folders / "link" / "cache")).startswith(f"{folders / 'open'} ")
    assert path_problem(str(folders / "safe-link" / "cache")) is None


@posix_only
def test_a_folder_that_cannot_be_examined_is_refused(folders):
    assert "cannot be examined" in path_problem(str(folders / "gone"))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0,
                    reason="only root can give a folder to another user")
def test_a_folder_someone_else_made_is_refused(folders):
    """The attack on ``NUMBA_CACHE_DIR=/tmp/x``: another user made ``x`` first."""
    os.chown(folders / "mine", 12345, 12345)
    assert "owned by uid 12345" in path_problem(str(folders / "mine" / "cache"))


def make_file(folder, kind: str):
    """A file of ``kind`` in ``folder``, as an attacker or a careless copy leaves it."""
    path = folder / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link":
        (folder / "target").write_bytes(b"x")
        path.symlink_to(folder / "target")
    elif kind != "missing":
        path.write_bytes(b"x")
        path.chmod({"0644": 0o644, "0600": 0o600, "0666": 0o666, "0646": 0o646,
                    "1666": 0o1666}[kind])
    return path


@posix_only
@pytest.mark.parametrize("kind, refused", [
    ("0644", None), ("0600", None), ("missing", None),
    ("0666", "can be written by anyone (mode 0666)"),
    ("0646", "can be written by anyone (mode 0646)"),
    ("1666", "can be written by anyone (mode 1666)"),  # no sticky exception for a file
    ("link", "is a symbolic link"), ("fifo", "is not a regular file")])
def test_the_rule_for_each_kind_of_cache_file(tmp_path, kind, refused):
    assert file_problem(str(make_file(tmp_path, kind))) == refused


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0,
                    reason="only root can give a file to another user")
def test_a_cache_file_someone_else_owns_is_refused(tmp_path):
    path = make_file(tmp_path, "0644")
    os.chown(path, 12345, 12345)
    assert file_problem(str(path)) == "is owned by uid 12345, not by you (uid 0) or root"


@posix_only
@pytest.mark.parametrize("group, members, private", [
    ("me", [], 1000), ("me", ["me"], 1000), ("staff", [], None), ("me", ["eve"], None),
    (None, [], None)])
def test_only_a_group_of_your_own_is_private(monkeypatch, group, members, private):
    import grp
    import pwd

    def group_of(gid):
        if group is None:
            raise KeyError(gid)
        return SimpleNamespace(gr_name=group, gr_gid=gid, gr_mem=members)

    monkeypatch.setattr(pwd, "getpwuid", lambda uid: SimpleNamespace(pw_name="me", pw_gid=1000))
    monkeypatch.setattr(grp, "getgrgid", group_of)
    assert private_group() == private


@posix_only
@pytest.mark.parametrize("yours_alone", [True, False])
def test_a_folder_and_file_your_private_group_may_write_are_safe(tmp_path, monkeypatch,
                                                                  yours_alone):
    """The real owner, group and user of each folder and file are judged (mode 0770 and 0664
    in the group of files made here, taken as your private group or not)."""
    from dualtape.kernels import cache_folder

    group = os.getegid()
    monkeypatch.setattr(cache_folder, "private_group", lambda: group if yours_alone else None)
    folder = tmp_path / "cache"
    folder.mkdir()
    folder.chmod(0o770)
    path = folder / "f.nbi"
    path.write_bytes(b"x")
    path.chmod(0o664)
    if yours_alone:
        assert path_problem(str(folder)) is None and file_problem(str(path)) is None
    else:
        assert path_problem(str(folder)) == f"{folder} can be written by group {group} (mode 0770)"
        assert file_problem(str(path)) == f"can be written by group {group} (mode 0664)"
