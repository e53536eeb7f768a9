"""Mutants of ``dualtape/text/`` (train-text and sample), ``dualtape/distributed.py`` and
``dualtape/cli.py``: the bugs a developer could make in the checks, the saving rules, the stop
paths and the ranks' agreement."""

from run_mutants import Mutant

TRAINER = "dualtape/text/trainer.py"
CHECKPOINT = "dualtape/text/checkpoint.py"
LOOP = "dualtape/text/loop.py"
CLI = "dualtape/text/cli.py"
PREPARE = "dualtape/text/prepare.py"
CONSOLE = "dualtape/text/console.py"
MODEL = "dualtape/text/model.py"
TEXT_DIST = "dualtape/text/distributed.py"
DIST = "dualtape/distributed.py"
UNIT = ("tests/test_text.py",)
SAFETY = ("tests/test_text_safety.py",)
TEXT = (*UNIT, *SAFETY)
MPI = ("tests/test_distributed.py",)
THREADS = "dualtape/text/threads.py"
THREAD_TESTS = ("tests/test_text_threads.py",)
RECORD = "dualtape/text/record.py"
PLOT = "dualtape/text/plot.py"
RECORD_TESTS = ("tests/test_text_record.py",)
LOCK_TESTS = ("tests/test_text_safety.py", "-k", "locked_checkpoint")
STOPS = ("tests/test_text_safety.py", "-k", "stop or pipe or full or hang or signal or sighup")


def trainer(old: str, new: str, why: str, tests: tuple[str, ...] = TEXT) -> Mutant:
    return Mutant(TRAINER, old, new, why, tests)


def checkpoint(old: str, new: str, why: str, tests: tuple[str, ...] = TEXT) -> Mutant:
    return Mutant(CHECKPOINT, old, new, why, tests)


def loop(old: str, new: str, why: str, tests: tuple[str, ...] = TEXT) -> Mutant:
    return Mutant(LOOP, old, new, why, tests)


def cli(old: str, new: str, why: str, tests: tuple[str, ...] = TEXT) -> Mutant:
    return Mutant(CLI, old, new, why, tests)


def prep(old: str, new: str, why: str, tests: tuple[str, ...] = TEXT) -> Mutant:
    return Mutant(PREPARE, old, new, why, tests)


MUTANTS = [
    # --- clipping and the step -----------------------------------------------------------------
    trainer("if self.config.clip > 0:", "if self.config.clip >= 0:",
            "--clip 0 (off) clips to zero", UNIT),
    trainer("return value * scale, dys * scale", "return value * scale, dys",
            "the gradient is not divided by seq_len (only the loss is)", UNIT),
    trainer("value = float(to_numpy(self._loss_sum)) / self._loss_count",
            "value = float(to_numpy(self._loss_sum))",
            "read_loss sums the steps' losses instead of averaging them", UNIT),
    trainer("if not math.isfinite(value):", "if math.isnan(value):",
            "an infinite loss is not a divergence", UNIT),
    trainer("            self.window_rng.bit_generator.state = drawn_from  # as if the step never "
            "began\n", "",
            "a step that raises leaves the window generator advanced", UNIT),
    # --- saving only a finite model ------------------------------------------------------------
    trainer("finite = all(bool(xp.all(xp.isfinite(p))) for group in self.net.params",
            "finite = True or all(bool(xp.all(xp.isfinite(p))) for group in self.net.params",
            "check_finite ignores the parameters"),
    trainer("finite = all(np.isfinite(v).all() for v in state.values() if v.dtype.kind == \"f\")",
            "finite = True",
            "check_finite ignores the optimizer state"),
    trainer("            finite = loss <= bound  # False for NaN too",
            "            finite = True",
            "finite weights too large to be of use (one step at --rate 1e30) are saved"),
    trainer("        self.check_finite(state)\n", "",
            "save writes a model without checking it is finite"),
    trainer("        except ValueError as exc:  # a destination io refuses\n"
            "            raise TextError(f\"cannot write checkpoint {path}: {exc}\") from None\n",
            "", "a ValueError from io's save is not a failed save (it ends the run)"),
    loop("    except DivergedError:\n        raise\n    except Exception:",
         "    except Exception:",
         "a diverged run is saved on the way out like any other failure"),
    loop("        rescue()\n        raise", "        raise",
         "a failure in the loop (a sample, a step) ends the run unsaved"),
    loop("        if not limits.writes:\n            trainer.check_finite()\n"
         "            return\n        assert limits.save",
         "        if not limits.writes:\n            return\n        assert limits.save",
         "ranks that do not write skip the check at periodic save points (they then hang)",
         MPI),
    # --- reading checkpoints -------------------------------------------------------------------
    checkpoint("if not _is_int(version) or version < 1:", "if not _is_int(version) or version < 0:",
               "text_format 0 is read as a known format", SAFETY),
    checkpoint("    if missing:\n", "    if missing and False:\n",
               "a checkpoint whose config lacks a field resumes with the default", SAFETY),
    checkpoint("sorted(set(rngs) - {DROPOUT}) != sorted(GENERATORS)",
               "not set(rngs) - {DROPOUT} <= set(GENERATORS)",
               "a checkpoint whose generator states lack an entry is accepted", SAFETY),
    checkpoint("(KeyError, TypeError, ValueError, OverflowError) as exc",
               "(KeyError, TypeError, ValueError) as exc",
               "a generator state with an out-of-range number escapes as a traceback", SAFETY),
    checkpoint("    for state in [rngs[name] for name in GENERATORS] + dropout:\n"
               "        _generator(state)\n", "",
               "generator states are not checked when the checkpoint is read", SAFETY),
    checkpoint("if problem is None and not (_is_int(step) and step >= 0):",
               "if problem is None and not step >= 0:", "a fractional step is accepted", SAFETY),
    checkpoint("    if layout.hidden != list(config.hidden):",
               "    if len(layout.hidden) != len(config.hidden):",
               "hidden sizes are compared by count only", SAFETY),
    checkpoint("    if net.dtype != config.dtype:", "    if net.dtype is None:",
               "a config dtype that contradicts the network is accepted", SAFETY),
    checkpoint("    if vocab.annotate_capitals != config.annotate_capitals:",
               "    if vocab.annotate_capitals and not config.annotate_capitals:",
               "a config that claims capital annotation the vocabulary lacks is accepted", SAFETY),
    checkpoint("if vocab.characters > config.vocab:", "if vocab.characters > config.vocab + 1:",
               "an off-by-one in the vocabulary size check", SAFETY),
    checkpoint("    if not all(np.isfinite(v).all() for v in state.values() if np.asarray(v).dtype"
               ".kind == \"f\"):",
               "    if not all(np.isfinite(v).all() for v in state.values() if np.asarray(v).dtype"
               ".kind == \"i\"):",
               "non-finite optimizer state in a checkpoint is accepted", SAFETY),
    checkpoint("if optimizer.state and len(optimizer.state) != count:",
               "if len(optimizer.state) > count:",
               "optimizer state for only some parameters is accepted", SAFETY),
    checkpoint("if optimizer.steps != self.step:", "if optimizer.steps > self.step:",
               "an optimizer that took fewer steps than the checkpoint is accepted", SAFETY),
    checkpoint("rngs=None if reseed else self.rngs, streams", "rngs=self.rngs, streams",
               "--seed when resuming keeps the stored generators", TEXT),
    # --- the command line: destinations --------------------------------------------------------
    prep("    if not (same or overwrite):", "    if not overwrite:",
        "--save onto the checkpoint being resumed needs --overwrite"),
    prep("    if not (same or overwrite):", "    if not same:",
        "--overwrite is ignored", SAFETY),
    prep("same = resume is not None and same_file(target, resume)",
        "same = resume is not None and str(target) == resume",
        "the resumed checkpoint is recognised by its spelling, not as the same file", SAFETY),
    prep("before = _check_save_path(args.save or args.resume, args.resume, args.overwrite)",
        "before = None if args.save is None else _check_save_path(args.save, args.resume, "
        "args.overwrite)",
        "saving back to --resume is not checked before training", SAFETY),
    cli("args.sample_chars, args.temperature, args.save or args.resume,",
        "args.sample_chars, args.temperature, args.save,",
        "--resume without --save does not save back", TEXT),
    prep("    there = path if step is None else f\"{path} (step {step})\"\n",
        "    there = path\n", "the refusal does not say which step the other checkpoint holds",
        SAFETY),
    prep('"save": ("a path", bool), "resume": ("a path", bool),', "",
        "an empty --save or --resume silently means none", SAFETY),
    # --- the command line: limits and messages -------------------------------------------------
    prep('"time_limit": ("positive and finite (leave it out for no limit)", positive_finite),',
        '"time_limit": ("positive", _positive),',
        "--time-limit inf reaches the progress bar", SAFETY),
    prep('"sample_chars": (f"from 0 to {MAX_SAMPLE_CHARS:,}", '
        'lambda n: 0 <= n <= MAX_SAMPLE_CHARS),',
        '"sample_chars": ("0 or more", non_negative),',
        "--sample-chars has no upper bound", SAFETY),
    cli('"seed": CONFIG_RULES["seed"]})', "})", "sample --seed -1 reaches numpy", SAFETY),
    cli("    if trainer.saved is not None:\n        return \"saved {} at step {}\".format(",
        "    if trainer.saved is not None and before is None:\n"
        "        return \"saved {} at step {}\".format(",
        "a run that saved over an existing file reports the old file as kept", SAFETY),
    cli("        return f\"{before} was left as it was\"\n",
        "        return \"nothing was saved\"\n",
        "a diverged run says nothing was saved while the old checkpoint is there", SAFETY),
    cli("    except DivergedError as exc:\n        return failed(str(exc))",
        "    except DivergedError as exc:\n        reporter.close()\n"
        "        return _fail(\"train-text\", f\"{exc}; nothing was saved\")",
        "a diverged run says nothing was saved after periodic saves (the reported bug)", SAFETY),
    cli("        if trainer.saved is not None:\n            return _fail(\"train-text\", \"{}; the "
        "last checkpoint written", "        if trainer.saved is None:\n            return "
        "_fail(\"train-text\", \"{}; the last checkpoint written",
        "a failed final save names the wrong checkpoint as kept", SAFETY),
    cli("    return stop.status or 0  # 0 only when nothing asked the run to stop",
        "    return 0", "a stopped run exits 0", STOPS),
    cli("        return stop.exit_code\n    except Exception as exc:",
        "        return INTERRUPTED\n    except Exception as exc:",
        "an abort after SIGTERM exits 130 instead of 143", SAFETY),
    cli("    except Exception as exc:  # a bug: still one line, after the rescue save\n"
        "        return failed(f\"the run failed at step {trainer.step_count}: \"\n"
        "                      f\"{type(exc).__name__}: {exc}\")\n", "",
        "a failure during the run escapes as a traceback", SAFETY),
    cli("    if output.lost is None or isinstance(output.lost, BrokenPipeError):",
        "    if output.lost is None or isinstance(output.lost, OSError):",
        "sample into a full disk exits 0", STOPS),
    cli("            if output.lost is not None:\n                break\n", "",
        "sample keeps drawing after its reader left", STOPS),
    cli("        to_stderr(f\"dualtape train-text: {stop.cause}; stopped at step ",
        "        print(f\"dualtape train-text: {stop.cause}; stopped at step ",
        "the notice of a lost stdout goes to stdout", STOPS),
    # --- stop requests and the output ----------------------------------------------------------
    Mutant(CONSOLE, "        if self.status is None:\n            self.status, self.cause",
           "        if True:\n            self.status, self.cause",
           "the last cause of a stop wins (SIGHUP then a dead terminal exits 74)", UNIT),
    Mutant(CONSOLE, "if self.status is not None and signum == signal.SIGINT:",
           "if self.status is not None:", "a second SIGTERM aborts without saving", UNIT),
    Mutant(CONSOLE, "STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)",
           "STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)", "SIGHUP kills the run unsaved",
           STOPS),
    Mutant(CONSOLE, "            self.lost = exc\n            silence_stdout()\n",
           "            self.lost = exc\n",
           "a lost stdout is not silenced: a later print raises", UNIT),
    Mutant(CONSOLE, "            self.stop.ask(OUTPUT_LOST, f\"stdout was lost ({exc.strerror or "
           "exc})\")\n", "",
           "a lost stdout does not stop the run (it goes on unseen)", STOPS),
    Mutant(CONSOLE, "        self.output.write(lambda: self.reporter.warn(message))\n"
           "        if self.output.lost is not None:\n            to_stderr(message)\n",
           "        self.output.write(lambda: self.reporter.warn(message))\n",
           "warnings after a lost stdout are lost too", UNIT),
    Mutant(CONSOLE, "        made: list[PlainReporter] = []\n"
           "        output.write(lambda: made.append(make_reporter(steps, time_limit)))\n"
           "        return cls(made[0] if made else PlainReporter(), output)",
           "        return cls(make_reporter(steps, time_limit), output)",
           "a bar that finds stdout gone raises", UNIT),
    # --- model --------------------------------------------------------------------------------
    Mutant(MODEL, "            p = np.exp((logp - logp.max()) / temperature)",
           "            p = np.exp(logp / temperature - (logp / temperature).max())",
           "a tiny temperature divides before shifting and gives NaN", UNIT),
    Mutant(MODEL, "            raw = _read_at_most(f, limit + 1)",
           "            raw = f.read(limit + 1)",
           "a huge --max-corpus-mb allocates its whole size for the read", SAFETY),
    Mutant(MODEL, "not isinstance(data.get(\"annotate_capitals\", False), bool)):",
           "False):", "a vocabulary's annotate_capitals 0 reads as false", SAFETY),
    # --- distributed train-text ---------------------------------------------------------------
    Mutant(TEXT_DIST, "window_rng.bit_generator.jumped(rank))",
           "window_rng.bit_generator.jumped(rank - 1))",
           "rank r draws rank r-1's windows", MPI),
    Mutant(TEXT_DIST, "window_rng.bit_generator.jumped(rank))",
           "window_rng.bit_generator.jumped(rank + 1))",
           "rank r draws rank r+1's windows", MPI),
    Mutant(TEXT_DIST, "        raise SystemExit(1)\n    failed = next(",
           "        return\n    failed = next(",
           "a rank other than 0 goes on after a rank failed to prepare", MPI),
    Mutant(TEXT_DIST, "vars(args).items() if name not in MAY_DIFFER}",
           "vars(args).items() if name in (\"steps\", \"time_limit\")}",
           "a fixed list of loop options: --valid-every or --sample-every may differ (a hang)",
           MPI),
    Mutant(TEXT_DIST, "    given.update(dataclasses.asdict(trainer.config))",
           "    given.update(dataclasses.asdict(trainer.config), stateful=False)",
           "--stateful on one rank only is not refused (the ranks then hang)", MPI),
    Mutant(TEXT_DIST, '    "log": "rank 0 alone writes",', '    "log": "", "log_every": "",',
           "ranks with different --log-every are not refused (they then hang)", MPI),
    Mutant(TEXT_DIST, '    shared["corpus\'s SHA-256"] = fingerprint(text)\n', "",
           "ranks training on different texts are not refused", MPI),
    Mutant(TEXT_DIST, "    for key, value in sorted(trainer.optimizer.state_dict().items()):\n"
           "        digest.update(key.encode() + np.ascontiguousarray(value).tobytes())\n", "",
           "ranks resuming different optimizer states are not refused", MPI),
    Mutant(TEXT_DIST, "comm.Allreduce(mpi.IN_PLACE, agreed, op=mpi.MAX)",
           "comm.Allreduce(mpi.IN_PLACE, agreed, op=mpi.MIN)",
           "the ranks stop only when every one asks", MPI),
    Mutant(TEXT_DIST, "else int(timed_out) * TIME_UP", "else 0",
           "--time-limit is ignored by distributed runs", MPI),
    Mutant(TEXT_DIST, "        if code > TIME_UP:  # another rank's request: exit as it does\n"
           "            stop_requested.ask(code, \"another rank asked to stop\")\n", "",
           "ranks stopped by another rank's signal exit with another status", MPI),
    Mutant(TEXT_DIST, "own = dataclasses.replace(own, writes=False, sample_chars=0)",
           "own = dataclasses.replace(own, save=None, sample_chars=0)",
           "ranks other than 0 skip the save points' finite check", MPI),
    # --- DataParallel -------------------------------------------------------------------------
    Mutant(DIST, "            if not self._checked_optimizer:\n"
           "                _check_same_optimizer(self.comm, self.optimizer)\n"
           "                self._checked_optimizer = True\n", "",
           "DataParallel does not check that the ranks' optimizers agree", MPI),
    Mutant(DIST, "                self._checked_optimizer = True\n", "",
           "DataParallel gathers the optimizers' settings at every step", MPI),
    Mutant(DIST, "        if theirs == reference:\n            continue",
           "        if theirs['kind'] == reference['kind']:\n            continue",
           "DataParallel compares only the optimizers' kinds", MPI),
    Mutant(DIST, "isinstance(value, (bool, int, float, str))",
           "isinstance(value, (float, str))",
           "DataParallel ignores integer settings (a different step count)", MPI),
    # --- the dualtape command -----------------------------------------------------------------
    Mutant("dualtape/cli.py",
           'return OUTPUT_LOST if args.command == "train-text" else 0', "return 0",
           "a training run whose BrokenPipeError escapes exits 0", UNIT),
    # --- threads (threads.py, cli.py) -----------------------------------------------------------
    Mutant(THREADS, "    if count < 1:\n        raise ValueError", "    if count < 0:\n"
           "        raise ValueError", "--threads 0 accepted", THREAD_TESTS),
    Mutant(THREADS, "word = text.strip().lower()", "word = text",
           "--threads AUTO or ' 2' refused", THREAD_TESTS),
    Mutant(THREADS, "def product_work(hidden: Sequence[int], batch: int, gates: int = 3)",
           "def product_work(hidden: Sequence[int], batch: int, gates: int = 4)",
           "the recurrent product counted with four blocks (U has three)", THREAD_TESTS),
    Mutant(THREADS, "return max((batch * n * gates * n for n in hidden), default=0)",
           "return sum(batch * n * gates * n for n in hidden)",
           "the layers' products added up, though they run one at a time", THREAD_TESTS),
    Mutant(THREADS, "wanted = max(1, work // PER_THREAD_WORK)",
           "wanted = max(1, -(-work // PER_THREAD_WORK))",
           "a second thread for any product above one thread's share", THREAD_TESTS),
    Mutant(THREADS, "share = max(1, cores // ranks)", "share = max(1, cores)",
           "every rank on a machine takes all its cores", THREAD_TESTS),
    Mutant(THREADS, "(cores - math.floor(load + 0.5)) // ranks", "(cores - int(load)) // ranks",
           "a load of 1.6 leaves as many cores free as 1.0", THREAD_TESTS),
    Mutant(THREADS, "free = share if load is None else", "free = share if True else",
           "more threads than the load leaves cores", THREAD_TESTS),
    Mutant(THREADS, "for name in ENVIRONMENT if environ.get(name)]",
           "for name in ENVIRONMENT if name in environ]",
           "an empty OMP_NUM_THREADS taken for a setting", THREAD_TESTS),
    Mutant(THREADS, "    if given:\n        return ThreadChoice(None", "    if False:\n"
           "        return ThreadChoice(None", "auto overrides OMP_NUM_THREADS", THREAD_TESTS),
    Mutant(THREADS, "    if not can_limit:\n", "    if False:\n",
           "auto claims a count it cannot set without threadpoolctl", THREAD_TESTS),
    Mutant(THREADS, "    if option == UNSET:\n", "    if option == AUTO:\n",
           "--threads unset chooses like auto", THREAD_TESTS),
    Mutant(THREADS, "    if count < min(wanted, share):\n", "    if count < wanted:\n",
           "the load blamed for the cores the machine lacks", THREAD_TESTS),
    Mutant(THREADS, "return len(affinity(0)) if affinity else os.cpu_count() or 1",
           "return os.cpu_count() or 1", "cores outside the affinity mask counted",
           THREAD_TESTS),
    Mutant(THREADS, "local = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)\n    try:\n"
           "        return local.Get_size()", "local = MPI.COMM_WORLD.Split_type("
           "MPI.COMM_TYPE_SHARED)\n    try:\n        return MPI.COMM_WORLD.Get_size()",
           "every rank of the run counted as on this machine", THREAD_TESTS),
    Mutant(THREADS, "    finally:\n        local.Free()\n", "    finally:\n        pass\n",
           "the machine's communicator never freed", THREAD_TESTS),
    Mutant(THREADS, 'count = "the libraries\' own" if self.count is None else str(self.count)',
           "count = str(self.count)", "the header says 'threads: None'", THREAD_TESTS),
    prep("    if isinstance(explicit, int) and not threads.threadpoolctl_installed():",
        "    if False:", "--threads N without threadpoolctl fails as a bug while training",
        THREAD_TESTS),
    cli("            ranks = threads.ranks_on_this_host()\n", "            ranks = 1\n",
        "each rank of --distributed takes every core", THREAD_TESTS),
    cli("    lines.append(chosen.line)\n", "", "the header does not say the threads",
        THREAD_TESTS),
    cli("return _train(args, prepared, run, stop, output, chosen.count, log)",
        "return _train(args, prepared, run, stop, output, None, log)",
        "the chosen threads are printed but not set", THREAD_TESTS),
    cli("                                  load=threads.load_average(),\n", "",
        "train-text ignores the machine's load", THREAD_TESTS),
    cli("cores=threads.usable_cores()", "cores=os.cpu_count()",
        "train-text counts cores outside its affinity mask", THREAD_TESTS),
    # --- the compile notice (cli.py) --------------------------------------------------------
    cli("            _ready_cpu_loops(trainer, output)\n", "",
        "the loops compile silently inside the first step", ("tests/test_numba_lstm.py",)),
    cli("    if announced.is_set():\n", "    if True:\n",
        "a quick load from the cache is announced as a compile", ("tests/test_numba_lstm.py",)),
    cli("        notice.cancel()\n", "", "the notice comes after a compile that has finished",
        ("tests/test_numba_lstm.py",)),
    # --- the training log (record.py), its plot (plot.py), the console's readings -----------
    Mutant(RECORD, "while rows and rows[-1].step >= row.step:",
           "while rows and rows[-1].step > row.step:",
           "a step repeated by a resumed run is kept twice", RECORD_TESTS),
    Mutant(RECORD, "if self.empty_first and start:", "if False:",
           "--overwrite appends to the other run's log instead of starting it afresh",
           RECORD_TESTS),
    Mutant(RECORD, 'elif os.pread(fd, 1, found.st_size - 1) != b"\\n":', "elif False:",
           "a row appended to a line cut short is glued onto it", RECORD_TESTS),
    Mutant(RECORD, "            if os.write(self._fd, line) != len(line):\n",
           "            os.write(self._fd, line)\n            if False:\n",
           "a row cut short by a full disk counts as written", RECORD_TESTS),
    Mutant(RECORD, "        if self.failed is not None:\n            return None\n", "",
           "after a failed row every reading warns and tries again", RECORD_TESTS),
    Mutant(RECORD, "if resumed_step is None and rows and not replace:",
           "if rows and not replace:", "a resumed run refuses its own log", RECORD_TESTS),
    Mutant(RECORD, "if resumed_step is None and rows and not replace:",
           "if resumed_step is None and rows:", "--overwrite does not replace a log",
           RECORD_TESTS),
    Mutant(RECORD, "r.step <= resumed_step]", "r.step < resumed_step]",
           "a resumed run's seconds continue from the row before the checkpoint's",
           RECORD_TESTS),
    Mutant(RECORD, "row._replace(seconds=row.seconds + self.seconds_before)", "row",
           "a resumed run's seconds start again from 0", RECORD_TESTS),
    Mutant(RECORD, "found = os.stat(path) if follow else os.lstat(path)",
           "found = os.stat(path)", "the default log is followed through a symbolic link",
           RECORD_TESTS),
    Mutant(RECORD, "        return first == CSV_HEADER", '        return first.startswith("step")',
           "another program's CSV with a step column is taken for a log", RECORD_TESTS),
    Mutant(RECORD, "sorted(record) != sorted(COLUMNS)", "not set(COLUMNS) <= set(record)",
           "JSON objects with other keys are taken for rows", RECORD_TESTS),
    Mutant(RECORD, '",".join("" if v is None else str(v) for v in values)',
           '",".join(str(v) for v in values)', "a missing held-out loss is written as None",
           RECORD_TESTS),
    Mutant(RECORD, "        if start and not _is_header(first, fmt):",
           "        if not _is_header(first, fmt):", "an empty log cannot be read",
           RECORD_TESTS),
    Mutant(RECORD, "            if found.st_size == 0:\n                os.write(fd, header",
           "            if True:\n                os.write(fd, header",
           "a resumed run writes the header again in the middle of the log", RECORD_TESTS),
    loop("        if limits.log is not None and limits.writes:",
         "        if limits.log is not None:",
         "every rank of a distributed run writes the log", RECORD_TESTS),
    loop("            if problem is not None:\n                reporter.warn(problem)",
         "            if problem is not None:\n                pass",
         "a log that cannot be written stops silently", RECORD_TESTS),
    Mutant(CONSOLE, "        emit(self.remember(step, loss, chars_per_second, valid_loss))",
           "        self.remember(step, loss, chars_per_second, valid_loss)",
           "plain output prints no readings", RECORD_TESTS),
    Mutant(CONSOLE, "        self.text(line)\n", "",
           "a terminal shows the readings on the bar only, none above it", UNIT),
    Mutant(CONSOLE, "size.columns < 2 or size.lines < 2", "size.columns < 2",
           "a terminal reporting 0 rows shows nothing", RECORD_TESTS),
    cli("follow=args.log is not None)", "follow=True)",
        "the default log is followed through a symbolic link", RECORD_TESTS),
    cli("resumed_step=trainer.step_count if args.resume else None",
        "resumed_step=None", "a resumed run refuses its own log", RECORD_TESTS),
    cli("replace=args.overwrite,", "replace=False,", "--overwrite does not restart the log",
        RECORD_TESTS),
    cli("{bits_per_char(nats):.3f} bits/char", "{nats:.3f} bits/char",
        "the closing line gives nats as bits", RECORD_TESTS),
    Mutant(PLOT, "        if handle.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:",
           "        if False:", "plot overwrites a file that is not a PNG", RECORD_TESTS),
    Mutant(PLOT, "            if held:", "            if False:",
           "the held-out loss is not drawn", RECORD_TESTS),
    trainer("core, states, total = self._logits, None, 0.0\n"
            "        with device_context(self.backend), evaluating(core):",
            "core, states, total = self._logits, None, 0.0\n"
            "        with device_context(self.backend):",
            "the held-out loss is scored with dropout on", ("tests/test_text_streams.py",)),
    Mutant(MODEL, "        f, _ = open_regular(path)  # a FIFO or device would block or never end",
           "        f = open(path, \"rb\")",
           "a FIFO as the corpus blocks forever", SAFETY),
    cli("    if beside is not None and same_file(path, beside):",
        "    if False:", "--log P --save P: the checkpoint overwrites the log", SAFETY),
    Mutant("dualtape/files.py", "    if os.path.realpath(a) == os.path.realpath(b):",
           "    if a == b:",
           "a --log spelled otherwise than its --save (a link, ./P) is accepted", SAFETY),
    Mutant("dualtape/files.py", "        return os.path.samefile(a, b)", "        return False",
           "a --log hard-linked to the checkpoint it resumes is accepted", SAFETY),
    Mutant(PLOT, "    if any(same_file(log, output) for log in logs):", "    if False:",
           "plot's image written over one of its logs", RECORD_TESTS),
    Mutant(RECORD, "    folder = Path(os.path.realpath(path)).parent",
           "    folder = Path(path).parent",
           "a --log link into a missing folder passes the start check", RECORD_TESTS),
    Mutant(RECORD, "OverflowError, RecursionError):", "OverflowError):",
           "plot of a deeply nested JSON line is a RecursionError traceback", RECORD_TESTS),
    Mutant(RECORD, "    if bits_per_char(nats) <= math.log2(symbols):",
           "    if bits_per_char(nats) < math.log2(symbols):",
           "a held-out loss of exactly log2 V is called worse than uniform",
           ("tests/test_text_streams.py",)),
    Mutant(RECORD, "    if bits_per_char(nats) <= math.log2(symbols):",
           "    if nats <= math.log2(symbols):",
           "nats compared with log2 V bits: worse than uniform is said too early",
           ("tests/test_text_streams.py",)),
    loop("            explained = True\n", "",
         "every held-out reading worse than uniform repeats the remark",
         ("tests/test_text_streams.py",)),
    loop("        worse = \"\" if valid is None or explained else",
         "        worse = \"\" if valid is None or True else",
         "a held-out reading worse than uniform during the run is not explained",
         ("tests/test_text_streams.py",)),
    Mutant("dualtape/text/lock.py",
           "    lock = os.path.realpath(path) + SUFFIX", "    lock = path + SUFFIX",
           "a second run through a link to the checkpoint takes another lock", LOCK_TESTS),
    Mutant("dualtape/text/lock.py", "    handle.write(f\"{os.getpid()}\\n\")\n", "",
           "the refusal does not name the process holding the lock", LOCK_TESTS),
    Mutant("dualtape/text/lock.py", "    path = save or resume\n", "    path = save\n",
           "a --resume run without --save takes no lock", LOCK_TESTS),
    Mutant(TEXT_DIST, "        if rank == 0:\n            hold_run_lock(",
           "        if False:\n            hold_run_lock(",
           "a distributed run takes no lock", (*MPI, "-k", "locked")),
    Mutant(TEXT_DIST, "        if rank == 0:\n            hold_run_lock(",
           "        if True:\n            hold_run_lock(",
           "every rank locks the checkpoint: rank 1 finds it held by rank 0 on one machine",
           (*MPI, "-k", "train_text_then_resume")),
]
