"""Mutants of ``dualtape/text/`` (train-text and sample), ``dualtape/distributed.py`` and
``dualtape/cli.py``: the bugs a developer could make in the checks, the saving rules, the stop
paths and the ranks' agreement."""

from run_mutants import Mutant

TRAINER = "dualtape/text/trainer.py"
CLI = "dualtape/text/cli.py"
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
STOPS = ("tests/test_text_safety.py", "-k", "stop or pipe or full or hang or signal or sighup")


def trainer(old: str, new: str, why: str, tests: tuple[str, ...] = TEXT) -> Mutant:
    return Mutant(TRAINER, old, new, why, tests)


def cli(old: str, new: str, why: str, tests: tuple[str, ...] = TEXT) -> Mutant:
    return Mutant(CLI, old, new, why, tests)


MUTANTS = [
    # --- clipping and the step -----------------------------------------------------------------
    trainer("if cfg.clip > 0:", "if cfg.clip >= 0:", "--clip 0 (off) clips to zero", UNIT),
    trainer("dys * scale, None, need_dxs", "dys, None, need_dxs",
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
    trainer("    except DivergedError:\n        raise\n    except Exception:",
            "    except Exception:",
            "a diverged run is saved on the way out like any other failure"),
    trainer("        rescue()\n        raise", "        raise",
            "a failure in the loop (a sample, a step) ends the run unsaved"),
    trainer("        if not limits.writes:\n            trainer.check_finite()\n"
            "            return\n        try:\n            trainer.save(limits.save)",
            "        if not limits.writes:\n            return\n"
            "        try:\n            trainer.save(limits.save)",
            "ranks that do not write skip the check at periodic save points (they then hang)",
            MPI),
    # --- reading checkpoints -------------------------------------------------------------------
    trainer("if not _is_int(version) or version < 1:", "if not _is_int(version) or version < 0:",
            "text_format 0 is read as a known format", SAFETY),
    trainer("    if missing:\n", "    if missing and False:\n",
            "a checkpoint whose config lacks a field resumes with the default", SAFETY),
    trainer("sorted(set(rngs) - {DROPOUT}) != sorted(GENERATORS)",
            "not set(rngs) - {DROPOUT} <= set(GENERATORS)",
            "a checkpoint whose generator states lack an entry is accepted", SAFETY),
    trainer("(KeyError, TypeError, ValueError, OverflowError) as exc",
            "(KeyError, TypeError, ValueError) as exc",
            "a generator state with an out-of-range number escapes as a traceback", SAFETY),
    trainer("    for state in [rngs[name] for name in GENERATORS] + dropout:\n"
            "        _generator(state)\n", "",
            "generator states are not checked when the checkpoint is read", SAFETY),
    trainer("if problem is None and not (_is_int(step) and step >= 0):",
            "if problem is None and not step >= 0:", "a fractional step is accepted", SAFETY),
    trainer("    if layout.hidden != list(config.hidden):",
            "    if len(layout.hidden) != len(config.hidden):",
            "hidden sizes are compared by count only", SAFETY),
    trainer("    if net.dtype != config.dtype:", "    if net.dtype is None:",
            "a config dtype that contradicts the network is accepted", SAFETY),
    trainer("    if vocab.annotate_capitals != config.annotate_capitals:",
            "    if vocab.annotate_capitals and not config.annotate_capitals:",
            "a config that claims capital annotation the vocabulary lacks is accepted", SAFETY),
    trainer("if vocab.characters > config.vocab:", "if vocab.characters > config.vocab + 1:",
            "an off-by-one in the vocabulary size check", SAFETY),
    trainer("    if not all(np.isfinite(v).all() for v in state.values() if np.asarray(v).dtype"
            ".kind == \"f\"):",
            "    if not all(np.isfinite(v).all() for v in state.values() if np.asarray(v).dtype"
            ".kind == \"i\"):",
            "non-finite optimizer state in a checkpoint is accepted", SAFETY),
    trainer("if optimizer.state and len(optimizer.state) != count:",
            "if len(optimizer.state) > count:",
            "optimizer state for only some parameters is accepted", SAFETY),
    trainer("if optimizer.steps != self.step:", "if optimizer.steps > self.step:",
            "an optimizer that took fewer steps than the checkpoint is accepted", SAFETY),
    trainer("rngs=None if reseed else self.rngs)", "rngs=self.rngs)",
            "--seed when resuming keeps the stored generators", TEXT),
    # --- the command line: destinations --------------------------------------------------------
    cli("    if not (same or overwrite):", "    if not overwrite:",
        "--save onto the checkpoint being resumed needs --overwrite"),
    cli("    if not (same or overwrite):", "    if not same:",
        "--overwrite is ignored", SAFETY),
    cli("same = resume is not None and os.path.samefile(target, resume)",
        "same = resume is not None and str(target) == resume",
        "the resumed checkpoint is recognised by its spelling, not as the same file", SAFETY),
    cli("before = _check_save_path(args.save or args.resume, args.resume, args.overwrite)",
        "before = None if args.save is None else _check_save_path(args.save, args.resume, "
        "args.overwrite)",
        "saving back to --resume is not checked before training", SAFETY),
    cli("args.sample_chars, args.temperature, args.save or args.resume,",
        "args.sample_chars, args.temperature, args.save,",
        "--resume without --save does not save back", TEXT),
    cli("    there = path if step is None else f\"{path} (step {step})\"\n",
        "    there = path\n", "the refusal does not say which step the other checkpoint holds",
        SAFETY),
    cli('"save": ("a path", bool), "resume": ("a path", bool),', "",
        "an empty --save or --resume silently means none", SAFETY),
    # --- the command line: limits and messages -------------------------------------------------
    cli('"time_limit": ("positive and finite (leave it out for no limit)", _positive_finite),',
        '"time_limit": ("positive", _positive),',
        "--time-limit inf reaches the progress bar", SAFETY),
    cli('"sample_chars": (f"from 0 to {MAX_SAMPLE_CHARS:,}", '
        'lambda n: 0 <= n <= MAX_SAMPLE_CHARS),',
        '"sample_chars": ("0 or more", _non_negative),',
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
    Mutant(TEXT_DIST, '        "seq_len", "batch", "seed")}', '        "seq_len", "seed")}',
           "ranks with different --batch are not refused", MPI),
    Mutant(TEXT_DIST, '"momentum", "l2", "clip",', '"momentum", "l2",',
           "ranks with different --clip are not refused", MPI),
    Mutant(TEXT_DIST, 'RUN_OPTIONS = ("steps", "time_limit", "log_every", "save_every")',
           'RUN_OPTIONS = ("steps", "time_limit")',
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
    Mutant(THREADS, "return max(batch * n * gates * n for n in hidden)",
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
    cli("    if isinstance(explicit, int) and not threads.threadpoolctl_installed():",
        "    if False:", "--threads N without threadpoolctl fails as a bug while training",
        THREAD_TESTS),
    cli("            ranks = threads.ranks_on_this_host()\n", "            ranks = 1\n",
        "each rank of --distributed takes every core", THREAD_TESTS),
    cli("    lines.append(chosen.line)\n", "", "the header does not say the threads",
        THREAD_TESTS),
    cli("return _train(args, prepared, run, stop, output, chosen.count)",
        "return _train(args, prepared, run, stop, output, None)",
        "the chosen threads are printed but not set", THREAD_TESTS),
    cli("                                  load=threads.load_average(),\n", "",
        "train-text ignores the machine's load", THREAD_TESTS),
    cli("cores=threads.usable_cores()", "cores=os.cpu_count()",
        "train-text counts cores outside its affinity mask", THREAD_TESTS),
    # --- the compile notice (cli.py) --------------------------------------------------------
    cli("            _ready_cpu_loops(trainer, output)\n", "",
        "the loops compile silently inside the first step", ("tests/test_numba_cell.py",)),
    cli("    if announced.is_set():\n", "    if True:\n",
        "a quick load from the cache is announced as a compile", ("tests/test_numba_cell.py",)),
    cli("        notice.cancel()\n", "", "the notice comes after a compile that has finished",
        ("tests/test_numba_cell.py",)),
]
