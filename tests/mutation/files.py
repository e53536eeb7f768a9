"""Mutants of ``dualtape/files.py``: checked destinations, atomic writes, regular files."""

from run_mutants import Mutant

FILES = "dualtape/files.py"
TESTS = ("tests/test_io.py", "tests/test_io_safety.py", "tests/test_io_destination.py",
         "bench/test_bench_options.py", "bench/test_bench_outputs.py")


def files(old: str, new: str, why: str) -> Mutant:
    return Mutant(FILES, old, new, why, TESTS)


MUTANTS = [
    # --- regular files ------------------------------------------------------------------------
    files("    if not stat.S_ISREG(found.st_mode):\n        if fd is not None:",
       "    if stat.S_ISDIR(found.st_mode):\n        if fd is not None:",
       "load reads FIFOs and devices"),
    files('os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)',
       'os.O_RDONLY | getattr(os, "O_BINARY", 0)',
       "load opens a FIFO blocking"),
    # --- the destination ------------------------------------------------------------------------
    files("        target = Path(os.path.realpath(given.parent)) / given.name",
       "        target = Path(os.path.realpath(path))",
       "replace=False follows a symlink at the destination"),
    files("found = os.stat(target) if replace else os.lstat(target)", "found = os.stat(target)",
       "replace=False takes a dangling symlink for a free name"),
    files("        if stat.S_ISDIR(found.st_mode):\n            raise IsADirectoryError",
       "        if False:\n            raise IsADirectoryError",
       "a folder destination not named as one"),
    files("        if not stat.S_ISREG(found.st_mode):\n            raise OSError(errno.EINVAL",
       "        if False:\n            raise OSError(errno.EINVAL",
       "a FIFO or device destination accepted"),
    files("        if not replace:\n            raise FileExistsError",
       "        if False:\n            raise FileExistsError",
       "replace=False writes before it notices the file exists"),
    files("    if not target.parent.is_dir():\n", "    if False:\n",
       "a missing folder reported by mkstemp, not by the check"),
    # --- writing --------------------------------------------------------------------------------
    files("mode = stat.S_IMODE(os.stat(target).st_mode) if replace",
       "mode = 0o666 & ~_umask() if replace",
       "the destination's mode not kept"),
    files("            os.chmod(f.fileno() if os.chmod in os.supports_fd else tmp, mode)\n", "",
       "new files keep mkstemp's 0600"),
    files("            os.fsync(f.fileno())\n", "", "the data not fsynced before the rename"),
    files("            write(f)\n            f.flush()\n"
          "            os.chmod(f.fileno() if os.chmod in os.supports_fd else tmp, mode)\n"
          "            os.fsync(f.fileno())\n",
          "            write(f)\n"
          "            os.chmod(f.fileno() if os.chmod in os.supports_fd else tmp, mode)\n"
          "            os.fsync(f.fileno())\n            f.flush()\n",
          "fsync before Python's buffer is flushed: a crash can leave a truncated file"),
    files("{'9' * PID_DIGITS}", "{os.getpid()}",
          "the temporary name fits only writers whose PID is as long as ours"),
    files("            os.replace(tmp, target)\n        else:\n            os.link(tmp, target)",
       "            os.replace(tmp, target)\n        else:\n            os.replace(tmp, target)",
       "replace=False replaces a file planted meanwhile"),
    files("            os.unlink(tmp)\n    except", "    except",
       "replace=False leaves its temporary file"),
    files("        Path(tmp).unlink(missing_ok=True)\n        if isinstance",
       "        if isinstance", "a failed save leaves its temporary file"),
    files("    _fsync_folder(target.parent)\n\n\ndef open_regular", "\n\ndef open_regular",
       "the rename not made durable"),
    # --- stale temporary files ------------------------------------------------------------------
    files("        if match is not None and not _process_runs(int(match.group(1))):",
       "        if match is not None:", "a live writer's temporary file removed"),
    files('ours = re.compile(re.escape(_writer()) + r"\\.([1-9][0-9]*)\\.[a-z0-9_]{8}")',
       'ours = re.compile(r"[^.]+(?:\\.[^.]+)*?\\.([1-9][0-9]*)\\.[a-z0-9_]{8}")',
       "another host's temporary files (NFS) removed"),
    files('        return host\n    return f"{host}+{space}"',
          '        return host\n    return host',
       "PIDs of another PID namespace compared as ours"),
    files("    room = max(NAME_MAX - 1 - len(os.fsencode(tail)), 0)", "    room = NAME_MAX",
       "a long destination name makes the temporary name too long"),
    files("        if not stat.S_ISREG(seen.st_mode) or seen.st_uid != os.getuid():",
       "        if seen.st_uid != os.getuid():", "a FIFO named like a temporary file opened"),
    files("        if not stat.S_ISREG(seen.st_mode) or seen.st_uid != os.getuid():",
       "        if not stat.S_ISREG(seen.st_mode):", "another user's file removed"),
    files('        if start in (b"", signature):', "        if True:",
       "a file that does not start like a partial one removed"),
    files("    except (PermissionError, OverflowError):\n        return True",
       "    except (PermissionError, OverflowError):\n        return False",
       "another user's running process taken for gone"),
    files("    if probe:\n", "    if False:\n",
          "a folder that refuses new files (read-only file system) accepted as a destination"),
    files("    if signature is not None:\n        _remove_stale_temporaries",
          "    if signature is None:\n        _remove_stale_temporaries",
          "dead writers' temporary files never removed"),
]
