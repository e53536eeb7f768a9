"""Whether numba's disk cache folder, and each file in it, is safe to load compiled code from
(POSIX).

A cache file is a pickle: whoever can put one where numba looks runs code in the next process.
So a folder numba would read from is refused when anyone but you (or root) could have put a
file there, or could swap the folder, or a folder above it, for one of their own. Every folder
from the cache folder up to ``/`` (links resolved), and every link on the way, must be:

- owned by you or by root (anyone else owns what they could rewrite), and
- not writable by others, nor by its group unless that group is your private group (named
  after you, your primary group, no other member listed: the Debian convention behind a
  umask of 002), except that a folder *above* the cache folder may be writable by all when it
  is sticky (``/tmp``, mode 1777): others can add names there but not move yours.

The cache folder itself gets no sticky exception: in it others could plant the very names
numba reads. So ``NUMBA_CACHE_DIR=/tmp/x`` is fine when you made ``/tmp/x`` (0700 or 0755),
refused when someone else did or when it is group- or world-writable; a world-writable folder
you own is refused too, as anyone may replace what is in it.

A safe folder can still hold an unsafe file (made with a umask of 000, copied in, or given
away by root), so each index or data file is checked before numba reads it (``file_problem``):
it must be a regular file, not a link, owned and writable as a folder must be.
"""

from __future__ import annotations

import os
import stat


def entry_problem(mode: int, owner: int, group: int, uid: int, private_group: int | None,
                  holds_files: bool) -> str | None:
    """Why a folder or link (``lstat``'s ``mode``, ``owner``, ``group``) on the way to the cache
    folder lets someone other than user ``uid`` plant files, or None; ``private_group`` is the
    user's own group (or None), ``holds_files`` says it is the cache folder itself."""
    if owner not in (uid, 0):
        return f"is owned by uid {owner}, not by you (uid {uid}) or root"
    if stat.S_ISLNK(mode):
        return None
    others = mode & stat.S_IWOTH
    if not others and not (mode & stat.S_IWGRP and group != private_group):
        return None
    if mode & stat.S_ISVTX and not holds_files:
        return None
    who = "anyone" if others else f"group {group}"
    return f"can be written by {who} (mode {stat.S_IMODE(mode):04o})"


def path_problem(folder: str) -> str | None:
    """Why the cache folder ``folder`` (it exists) is not safe to load code from, naming the
    folder or link at fault, or None when ``entry_problem`` passes everything on its way (and
    off POSIX, where there are no such modes to read)."""
    if os.name != "posix":
        return None
    real = os.path.realpath(folder)
    uid, private = os.geteuid(), private_group()
    for path in dict.fromkeys([*_up_to_root(os.path.abspath(folder)), *_up_to_root(real)]):
        try:
            st = os.lstat(path)
        except OSError as exc:  # gone, or not ours to look at: nothing to trust
            return f"{path} cannot be examined ({exc.strerror})"
        problem = entry_problem(st.st_mode, st.st_uid, st.st_gid, uid, private, path == real)
        if problem:
            return f"{path} {problem}"
    return None


def file_problem(path: str) -> str | None:
    """Why the cache file ``path`` is not safe to load code from (a link, not a regular file, or
    one ``entry_problem`` refuses), or None; None too when it does not exist (numba then
    compiles) and off POSIX."""
    if os.name != "posix":
        return None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be examined ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    return entry_problem(st.st_mode, st.st_uid, st.st_gid, os.geteuid(), private_group(), True)


def private_group() -> int | None:
    """Your primary group when it is yours alone (named after you, no other member listed),
    else None. Someone else with it as their primary group is not seen."""
    import grp  # POSIX only
    import pwd

    try:
        user = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(user.pw_gid)
    except KeyError:  # a uid or gid with no name (containers)
        return None
    alone = group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}
    return group.gr_gid if alone else None


def _up_to_root(path: str) -> list[str]:
    """``path`` (absolute) and every folder above it, ``/`` last."""
    paths = [path]
    while paths[-1] != os.path.dirname(paths[-1]):
        paths.append(os.path.dirname(paths[-1]))
    return paths
