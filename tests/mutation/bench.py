"""Mutants of ``dualtape/benchmarks/`` (``dualtape bench``) and ``bench/compare_devices.py``."""

from run_mutants import Mutant

CLI_TESTS = ("bench/test_bench_options.py", "bench/test_bench_outputs.py",
             "bench/test_benchmark_cli.py")
TIMING_TESTS = ("bench/test_bench_timing.py", "bench/test_benchmark_cli.py",
                "bench/test_bench_options.py")
REPORT_TESTS = ("bench/test_benchmark_cli.py", "bench/test_bench_outputs.py")
OUTPUT_TESTS = ("bench/test_bench_outputs.py", "bench/test_bench_options.py")
CLI = "dualtape/benchmarks/cli.py"
MEASURE = "dualtape/benchmarks/measure.py"
WORKLOADS = "dualtape/benchmarks/workloads.py"
RUNNERS = "dualtape/benchmarks/runners.py"
CALLS = "dualtape/benchmarks/calls.py"
REPORT = "dualtape/benchmarks/report.py"
OUTPUT = "dualtape/benchmarks/output.py"
COMPARE = "bench/compare_devices.py"
THREADS = "dualtape/text/threads.py"
CHAR_MODEL = "dualtape/benchmarks/char_model.py"
REFERENCES = "dualtape/benchmarks/references.py"
JAX_TEXT = "dualtape/benchmarks/jax_text.py"
TORCH_TEXT = "dualtape/benchmarks/torch_text.py"
TORCH_LSTM = "dualtape/benchmarks/torch_lstm.py"
MEMORY = "dualtape/benchmarks/memory.py"
MEMORY_TESTS = ("bench/test_memory_bench.py",)
CHAR_TESTS = ("bench/test_char_model.py",)
ROW_TESTS = ("bench/test_reference_rows.py",)


def _cli(old: str, new: str, why: str) -> Mutant:
    return Mutant(CLI, old, new, why, CLI_TESTS)


def _measure(old: str, new: str, why: str) -> Mutant:
    return Mutant(MEASURE, old, new, why, TIMING_TESTS)


def _workloads(old: str, new: str, why: str) -> Mutant:
    return Mutant(WORKLOADS, old, new, why, TIMING_TESTS)


def _report(old: str, new: str, why: str) -> Mutant:
    return Mutant(REPORT, old, new, why, REPORT_TESTS)


def _memory(old: str, new: str, why: str) -> Mutant:
    return Mutant(MEMORY, old, new, why, MEMORY_TESTS)


def _output(old: str, new: str, why: str) -> Mutant:
    return Mutant(OUTPUT, old, new, why, OUTPUT_TESTS)


MUTANTS = [
    # --- option checks (cli.py) ------------------------------------------------------------
    _cli("    if not names:\n        raise _refused(f\"{option} needs at least one name",
         "    if False:\n        raise _refused(f\"{option} needs at least one name",
         "an empty list option (--workloads ,) accepted"),
    _cli("names.count(n) > 1", "names.count(n) > 2", "a name given twice accepted"),
    _cli('names = [s.strip() for s in text.split(",") if s.strip()]',
         'names = [s for s in text.split(",") if s]', "list items not stripped of spaces"),
    _cli("        if chosen in backends:\n", "        if item in given:\n",
         "two spellings of one backend and device (torch, torch:cpu) both timed"),
    _cli("        except BackendUnavailable as exc:\n            unavailable.append",
         "        except ValueError as exc:\n            unavailable.append",
         "an unknown backend becomes a note instead of a refusal"),
    _cli("names = [b for b in available_backends() if b not in SPEED_BACKENDS_EXCLUDED]",
         "names = available_backends()", "array_api_strict timed by default"),
    Mutant(RUNNERS, "int(device) if device.isdigit() else device or None", "device or None",
           "a device index given as a string (cupy:1)", CLI_TESTS),
    _cli("    if not backends:\n        raise _refused(\"none of the requested",
         "    if not backends and not unavailable:\n        raise _refused(\"none of the requested",
         "only unavailable backends: nothing to time, yet no refusal"),
    _cli('    if names == ["none"]:', '    if "none" in names:', "'none' inside a list accepted"),
    _cli("    if unknown:\n        raise _refused(f\"unknown references",
         "    if unknown and len(names) == 1:\n        raise _refused(f\"unknown references",
         "an unknown reference in a list ignored"),
    _cli("    return [r for r in found if r.label in names]\n", "    return found\n",
         "a list of references runs all of them"),
    _cli("    if not chosen:\n        raise _refused(\"--quick leaves", "    if False:\n"
         "        raise _refused(\"--quick leaves", "--quick leaving no workload not refused"),
    _cli("if set(dtypes) - set(DTYPES):", "if set(DTYPES) - set(dtypes):",
         "dtype check the wrong way round (float16 accepted, float32 alone refused)"),
    _cli("        raise _refused(str(exc)) from None\n    if isinstance(option, int):",
         "        option = AUTO\n    if isinstance(option, int):", "a bad --threads taken as auto"),
    _cli("    if isinstance(option, int):\n        require_threadpoolctl()\n", "",
         "--threads without threadpoolctl found only when timing starts"),
    _cli("        with limited_threads(count, choice.overlap):\n",
         "        with limited_threads(None, choice.overlap):\n",
         "the rows run on the libraries' own threads, not those chosen for them"),
    _cli("    return 1 if {c.count for c in chosen.values()} == {1} else None",
         "    return None", "JAX left on XLA's threads when every row runs on one"),
    _cli("row{' but: ' + others if others else ''}", "row",
         "the header hides the rows that run on more threads"),
    _cli("            if name == \"plot\":\n                report.plot_format(path)\n", "",
         "an unknown plot format found after the run"),
    _cli("        if target in targets:", "        if False:",
         "two output options naming one file"),
    _cli("        if path is None:\n            continue",
         "        if not path:\n            continue",
         "an empty output path silently ignored"),
    _cli("return 1 if self.unwritten or any(", "return 1 if any(",
         "exit status 0 when a file was not written"),
    _cli("            failed.append(option)\n", "",
         "a file that was not written not counted"),
    _cli("            failed.append(option)\n", "            failed.append(option)\n"
         "            break\n", "the first failed file stops the others being written"),
    _cli('        if value is not None and value != DEFAULTS.get(name):',
         '        if value is not None:', "the recorded command repeats the defaults"),
    _cli('words += [f"--{name}", shlex.quote(str(value))]',
         'words += [f"--{name}", str(value)]', "the recorded command does not quote a path"),
    _cli('words = ["dualtape", "bench", *(["--quick"] if args.quick else [])]',
         'words = ["dualtape", "bench"]', "the recorded command drops --quick"),
    _cli('meta["command"] = command or command_line(args)',
         'meta["command"] = command_line(args)', "compare_devices' own command not recorded"),
    _cli("write_outputs(request.outputs, results, meta, more)",
         "write_outputs(request.outputs, results, meta)",
         "the extra sections missing from the markdown page"),
    _cli("        print(\"dualtape bench: interrupted\", file=sys.stderr)\n        return 130",
         "        print(\"dualtape bench: interrupted\", file=sys.stderr)\n        return 1",
         "Ctrl-C exits 1, like a failed row"),
    # --- workloads and timing (workloads.py, measure.py) ---------------------------------
    _workloads("{w.group, w.name, w.key} & set(names or ())", "{w.group, w.key} & set(names or ())",
             "a workload's bare name not accepted"),
    _workloads("not (quick and (w.batch > 32 or", "not (quick and (w.batch >= 32 or",
             "--quick drops batch 32"),
    _workloads("    if unknown:\n        raise ValueError(f\"unknown workloads",
             "    if unknown and not chosen:\n        raise ValueError(f\"unknown workloads",
             "an unknown workload beside a known one ignored"),
    _measure("for _ in range(timing.warmup)]", "for _ in range(timing.warmup + 1)]",
             "one warm-up call too many"),
    _measure("max(1, math.ceil(timing.min_sample / once))",
             "max(1, int(timing.min_sample / once))", "samples shorter than min_sample"),
    _measure("per_round += once * result.number", "per_round += once",
             "a round's time counts one call per case, not a sample"),
    _measure("int(timing.budget * len(cases) / max(per_round, 1e-9))",
             "int(timing.budget / max(per_round, 1e-9))", "the budget is for all cases together"),
    _measure("cases[shift:] + cases[:shift]", "cases",
             "every round starts with the same case (no round-robin)"),
    _measure("                if run is None:\n                    continue",
             "                if run is None:\n                    results.append(result)\n"
             "                    continue", "an uncovered workload becomes an empty row"),
    _measure("            if result.error is None:\n                try:\n"
             "                    result.samples",
             "            if True:\n                try:\n                    result.samples",
             "a case that failed is still timed in later rounds"),
    _measure("                except Exception as exc:\n                    result.error = "
             "f\"{type(exc).__name__}: {exc}\"\n    if workload.op",
             "                except ZeroDivisionError as exc:\n                    result.error = "
             "f\"{type(exc).__name__}: {exc}\"\n    if workload.op",
             "a failure in a timed round stops every other row"),
    _measure("        sync()\n        return (time.perf_counter() - start) / number",
             "        return (time.perf_counter() - start) / number",
             "the clock stops before the device has finished"),
    _measure("        sync()\n        start = time.perf_counter()",
             "        start = time.perf_counter()",
             "the clock starts while earlier work is still queued"),
    Mutant(THREADS, "                torch.set_num_threads(previous)\n", "                pass\n",
           "torch's thread count not restored", TIMING_TESTS),
    Mutant(THREADS, "    if n < 1:\n        raise ValueError(f\"a thread limit", "    if n < 0:\n"
           "        raise ValueError(f\"a thread limit", "limited_threads(0) accepted",
           TIMING_TESTS),
    _measure("1e3 * float(np.median(self.samples))", "1e3 * float(np.mean(self.samples))",
             "the mean reported as the median"),
    Mutant(RUNNERS, "return backend.name if backend.device == default else",
             "return backend.name if backend.device != default else",
           "row labels with the device the wrong way round", TIMING_TESTS),
    # --- report.py ------------------------------------------------------------------------
    _report('cells += [f"{base.median_ms / r.median_ms:.2f}×" if base else "–"] * ratio',
            'cells += [f"{r.median_ms / base.median_ms:.2f}×" if base else "–"] * ratio',
            "the table's ratio inverted"),
    _report("and x.workload == r.workload and x.dtype == r.dtype and x.samples",
            "and x.workload == r.workload and x.samples",
            "a row compared with numpy in another dtype"),
    _report('cells.append(f"{base.median_ms / ref.median_ms:.2f}×" if ref and base else "–")',
            'cells.append(f"{ref.median_ms / base.median_ms:.2f}×" if ref and base else "–")',
            "the references' ratio inverted"),
    _report("f\"{_ms(r.median_ms)} | {base.median_ms / r.median_ms:.2f}× |\")",
            "f\"{_ms(r.median_ms)} | {r.median_ms / base.median_ms:.2f}× |\")",
            "the bound's ratio inverted"),
    _report("and (base := _numpy(results, r)) is not None and base is not r",
            "and (base := _numpy(results, r)) is not None",
            "a ratio column of 1.00× with numpy alone"),
    _report("        how_to_read(results),\n        *extra,\n", "        how_to_read(results),\n",
            "extra sections left off the markdown page"),
    _report("suffix = os.path.splitext(path)[1][1:].lower()",
            "suffix = os.path.splitext(path)[1][1:]", "--plot out.PNG refused"),
    _report("fig.savefig(f, format=plot_format(path), dpi=120)", "fig.savefig(f, dpi=120)",
            "the plot written as PNG whatever the name says"),
    # --- output.py ------------------------------------------------------------------------
    _output("    if not path:\n        raise ValueError(f\"{option} needs a file name\")\n", "",
            "an empty path taken as the current folder"),
    _output('    if path.endswith(("/", os.sep)):', "    if False:",
            "out/ written as a file named out"),
    _output("        target = check_destination(path, probe=True)",
            "        target = check_destination(path)",
            "a folder that takes no new file (read-only file system) found at the end"),
    # --- the main job's workload (char_model.py, measure.py) -----------------------------
    Mutant(CHAR_MODEL, "optimizer=\"adam\", rate=ADAM_RATE, clip=0.0",
           "optimizer=\"adam\", rate=ADAM_RATE, clip=1.0",
           "the main job's workload clips its gradients", CHAR_TESTS),
    Mutant(CHAR_MODEL, "ADAM_RATE = 0.01", "ADAM_RATE = 0.001",
           "the main job trains with Adam's default rate, not train-text's", CHAR_TESTS),
    Mutant(CHAR_MODEL, "hidden=[workload.size] * workload.layers",
           "hidden=[workload.size]", "the main job's model has one LSTM", CHAR_TESTS),
    Mutant(CHAR_MODEL, "    if len(data[\"vocab\"]) != workload.n_in:",
           "    if False:", "a changed corpus silently changes the main job", CHAR_TESTS),
    Mutant(CHAR_MODEL, "rng = np.random.default_rng([cfg.seed, 1])",
           "rng = np.random.default_rng(cfg.seed)",
           "the references draw other windows than the trainer", CHAR_TESTS),
    Mutant(CHAR_MODEL, "net = build_text_network(len(vocab), cfg.hidden, seed=cfg.seed, "
           "dtype=cfg.dtype)", "net = build_text_network(len(vocab), cfg.hidden, "
           "dtype=cfg.dtype)", "the rows' parameters are not drawn from the seed", CHAR_TESTS),
    Mutant(CHAR_MODEL, "            layer.params = {k: from_host(np.array(v), backend) "
           "for k, v in params.items()}\n", "            pass\n",
           "dualtape's row ignores the data's parameters", CHAR_TESTS),
    Mutant(WORKLOADS, "return self.steps * self.batch if self.op == \"text\" else None",
           "return (self.steps + 1) * self.batch if self.op == \"text\" else None",
           "chars per step counts the window's extra symbol", CHAR_TESTS),
    _workloads("return self.steps * self.batch if self.op == \"text\" else None",
               "return self.steps * self.batch",
             "chars/s for workloads that train on no characters"),
    Mutant(MEASURE, "return None if chars is None else 1e3 * chars / self.median_ms",
           "return None if chars is None else chars / self.median_ms",
           "chars per millisecond reported as chars per second", CHAR_TESTS),
    Mutant(MEASURE, "\"chars_per_s\": self.chars_per_second, ", "",
           "chars/s left out of the JSON record", CHAR_TESTS),
    Mutant(WORKLOADS, "n_in=57, layers=2)", "n_in=57)", "the main job's workload has one LSTM",
           CHAR_TESTS),
    # --- the reference rows (references.py, cli.py) -----------------------------------------
    Mutant(REFERENCES, "        if workload.op not in (\"train\", \"text\"):\n",
           "        if workload.op != \"train\":\n", "no torch.nn.LSTM row for the main job",
           ROW_TESTS),
    Mutant(REFERENCES, "        if workload.op != \"train\":\n            return None\n        "
           "import jax", "        if workload.op == \"sgd\":\n            return None\n"
           "        import jax", "the JAX row tries workloads it has no model for",
           ("bench/test_references.py",)),
    Mutant(REFERENCES, "        for model in self.models:\n            model.block()",
           "        pass", "the clock stops before JAX has finished", ROW_TESTS),
    Mutant(REFERENCES, "    if threads > 1:\n        return (f\"jax:",
           "    if threads >= 1:\n        return (f\"jax:",
           "--threads 1 does not reach JAX", ROW_TESTS),
    Mutant(REFERENCES, "    if started is not None and started.backends_are_initialized():",
           "    if False:", "a JAX started before the limit said to be limited", ROW_TESTS),
    Mutant(REFERENCES, "    if JAX_SINGLE_THREAD not in flags.split():\n",
           "    if True:\n", "the XLA flag added again on every run", ROW_TESTS),
    Mutant(REFERENCES, "os.environ[\"XLA_FLAGS\"] = f\"{flags} {JAX_SINGLE_THREAD}\".strip()",
           "os.environ[\"XLA_FLAGS\"] = JAX_SINGLE_THREAD",
           "the user's own XLA flags dropped", ROW_TESTS),
    Mutant(REFERENCES, "    if jax_installed():\n        runners.append",
           "    if True:\n        runners.append", "a JAX row without JAX", ROW_TESTS),
    Mutant(REFERENCES, "return importlib.util.find_spec(\"jax\") is not None",
           "return True", "JAX said to be installed when it is not", ROW_TESTS),
    Mutant(REFERENCES, "if not installed()]", "if installed()]",
           "the libraries present listed as missing", ROW_TESTS),
    Mutant(CLI, "    return chosen, notes + [r.note for r in chosen if isinstance(r, "
           "references.JaxRunner)]", "    return chosen, notes",
           "the JAX row's threads not said", ROW_TESTS),
    _cli("        if absent:\n            raise _refused", "        if False:\n"
         "            raise _refused",
         "a torch or JAX reference without its library said to be unknown"),
    _cli("chosen, notes = found, [NO_LIBRARY[library] for library in missing]",
         "chosen, notes = found, []", "no note when the torch or JAX rows are missing"),
    Mutant(CLI, "references, reference_notes = reference_runners(args.references, "
           "jax_limit(threads))",
           "references, reference_notes = reference_runners(args.references)",
           "--threads 1 does not reach the JAX row", ROW_TESTS),
    # --- the report of the text group (report.py) -------------------------------------------
    Mutant(REPORT, 'ratio = f"{base.median_ms / r.median_ms:.2f}×" if base else "–"',
           'ratio = f"{r.median_ms / base.median_ms:.2f}×" if base else "–"',
           "the chars/s table's ratio inverted", ROW_TESTS),
    Mutant(REPORT, "if r.workload.chars_per_call and r.samples]",
           "if r.workload.chars_per_call]", "a failed row in the chars/s table", ROW_TESTS),
    Mutant(REPORT, "        *([f\"## Characters per second\\n\\n{chars}\"] if (chars := "
           "throughput(results)) else []),\n", "", "chars/s left off the markdown page",
           ROW_TESTS),
    # --- the references' maths (jax_text.py, torch_text.py, torch_lstm.py) ------------------
    Mutant(JAX_TEXT, "    t = t + 1\n", "", "JAX's Adam without its step count (t = 0)",
           CHAR_TESTS),
    Mutant(JAX_TEXT, "(jnp.sqrt(v * scale_v) + EPS)", "jnp.sqrt(v * scale_v + EPS)",
           "JAX's Adam adds eps inside the root", CHAR_TESTS),
    Mutant(JAX_TEXT, "ids[1:, :, None], axis=-1))", "ids[:-1, :, None], axis=-1))",
           "JAX's targets are the inputs, not the next symbols", CHAR_TESTS),
    Mutant(JAX_TEXT, "        return c, o * c\n", "        return c, o * jnp.tanh(c)\n",
           "JAX's cell is the textbook one (tanh on the cell)", CHAR_TESTS),
    Mutant(JAX_TEXT, "return -jnp.mean(jnp.take_along_axis(",
           "return -jnp.sum(jnp.take_along_axis(",
           "JAX's loss summed, not averaged per character", CHAR_TESTS),
    Mutant(JAX_TEXT, "        if dtype == \"float64\":\n            "
           "jax.config.update(\"jax_enable_x64\", True)\n", "",
           "JAX's float64 row silently in float32", CHAR_TESTS),
    Mutant(TORCH_TEXT, "ids[1:].reshape(-1))", "ids[:-1].reshape(-1))",
           "torch's targets are the inputs, not the next symbols", CHAR_TESTS),
    Mutant(TORCH_TEXT, "        self.optimizer.zero_grad(set_to_none=True)\n", "",
           "torch's gradients accumulate over steps", CHAR_TESTS),
    Mutant(TORCH_TEXT, "        return h @ self.W.T + self.b\n", "        return h @ self.W.T\n",
           "torch autograd's top has no bias", CHAR_TESTS),
    Mutant(TORCH_TEXT, "            h = lstm(h)[0]", "            h = lstm(h)[1][0]",
           "torch.nn.LSTM's final state taken for its outputs", CHAR_TESTS),
    Mutant(TORCH_LSTM, "            c, h = self._cell(a, c)\n            outputs.append(h)\n",
           "            c, h = self._cell(a, c)\n            outputs.append(c)\n",
           "torch autograd's LSTM outputs its cells", CHAR_TESTS),
    # --- the memory group (memory.py and its parts elsewhere) -------------------------------
    _memory('            f.write("5")', '            f.write("1")',
            "the peak resident set not reset before the call (clear_refs 1)"),
    _memory('    return (_status_kib("VmHWM") - before) * 1024',
            '    return _status_kib("VmHWM") * 1024',
            "the whole peak resident set reported, not its increase"),
    _memory("        if done.returncode != 0:", "        if done.returncode < 0:",
            "a measuring process that exits 1 read as a result"),
    _memory('        np.savez(spec["weights"], **call.weights())\n        call.restore()\n',
            '        call.restore()\n        np.savez(spec["weights"], **call.weights())\n',
            "the weights saved after the restore (the seeded ones) where no second call runs"),
    _memory("    return None, NOT_SEEN.format", "    call()\n    return None, NOT_SEEN.format",
            "a row without a measure still run (twice the time, nothing measured)"),
    _memory("        if full is None or full is r:", "        if full is None:",
            "the full tape compared with itself (a 0 that says nothing)"),
    _memory("and f.reference == r.reference and f.dtype == r.dtype\n                     and "
            "f.workload.steps", "and f.reference == r.reference\n                     and "
            "f.workload.steps", "a float32 row compared with the float64 full tape"),
    _memory('if f.workload.tape == "full" and f.runner == r.runner\n                     and '
            "f.reference", 'if f.workload.tape == "full"\n                     and '
            "f.reference", "torch's checkpointed row compared with dualtape's full tape"),
    _memory('np.abs(theirs[f"{k}.{name}"].astype(np.float64) - p)))',
            'np.abs(theirs[f"{k}.{name}"].astype(np.float64))))',
            "relative to the weights' size, not to the update's"),
    _memory("        if mine.keys() != theirs.keys():\n            raise",
            "        if False:\n            raise", "weights of other names compared anyway"),
    Mutant(CALLS, "            for k, p in seeded.items():\n                layer.params[k] = "
           "self.xp.asarray(p, copy=True)", "            pass",
           "each call continues from the last one's weights (overflows at T = 1,000)",
           MEMORY_TESTS),
    Mutant(CALLS, "SGD(rate=self.rate), tape=self.tape)", "SGD(rate=self.rate))",
           "the checkpointed rows run the full tape", MEMORY_TESTS),
    Mutant(WORKLOADS, "              or not names and w.group not in ON_REQUEST]",
           "              or not names]", "the memory group (minutes, GBs) in the default run",
           MEMORY_TESTS),
    Mutant(WORKLOADS, "and w.steps > QUICK_STEPS))]",
           "and w.steps >= QUICK_STEPS))]",
           "--quick drops the 1,000-step memory rows too", MEMORY_TESTS),
    Mutant(MEASURE, "                    result.memory = memory.measure(runner_of[id(result)], "
           "workload,\n                                                   result.dtype, threads)",
           "                    pass", "the memory rows timed but never measured", MEMORY_TESTS),
    Mutant(CLI, "    compare_to_full_tape(results)\n", "",
           "the weights never compared with the full tape's", MEMORY_TESTS),
    Mutant(REPORT, 'ratio = f"{r.median_ms / full.median_ms:.2f}×" if full and r.samples',
           'ratio = f"{full.median_ms / r.median_ms:.2f}×" if full and r.samples',
           "the time over the full tape's inverted", MEMORY_TESTS),
    Mutant(REPORT, "_mib(m.allocated), _mib(m.rss)", "_mib(m.rss), _mib(m.allocated)",
           "the two peaks in each other's columns", MEMORY_TESTS),
    Mutant(TORCH_LSTM, "            *cells, ys = checkpoint(segment, *cells,",
           "            *_, ys = checkpoint(segment, *cells,",
           "torch's checkpointed segments each start from zero cells", MEMORY_TESTS),
    Mutant(TORCH_LSTM, "            for p, seeded in zip(self.params, self.seeded, strict=True):\n"
           "                p.copy_(seeded)", "            pass",
           "torch's memory calls continue from the last one's weights", MEMORY_TESTS),
    Mutant(REFERENCES, "tl.SeededTorchCall(net, xs, segment_length(workload.tape, workload.steps))",
           "tl.SeededTorchCall(net, xs, None)", "torch's checkpointed row runs the full graph",
           MEMORY_TESTS),
    # --- compare_devices.py ---------------------------------------------------------------
    Mutant(COMPARE, "    return done.status", "    return 0",
           "compare_devices: exit status 0 when a file was not written", REPORT_TESTS),
    Mutant(COMPARE, "    if args.rerun_without_openblas_env:\n        found.append",
           "    if not args.rerun_without_openblas_env:\n        found.append",
           "compare_devices: the OpenBLAS re-run section the wrong way round", REPORT_TESTS),
    Mutant(MEASURE, "                once = max(min(warm[-2:]), 1e-9)",
           "                once = max(warm[-1], 1e-9)",
           "bench: a one-time cost in the last warm-up call sets the samples' length",
           TIMING_TESTS),
    Mutant(MEASURE, "min_sample=0.004)", "min_sample=0.004, warmup=1)",
           "bench --quick: every sample one cold call after a slow first one", TIMING_TESTS),
    Mutant(MEASURE, "    warmup: int = 3", "    warmup: int = 2",
           "bench: an optimizer's one-time self-check at the second call leaves every sample "
           "one cold call", TIMING_TESTS),
    Mutant("dualtape/benchmarks/bound.py", "    if numba_lstm.unavailable() is None:",
           "    if False:", "the bound's per-step products with the interpreter between them",
           CLI_TESTS),
    Mutant("dualtape/benchmarks/bound.py", "    if rows == 1 and numba_lstm.unavailable() is None:",
           "    if False:", "the bound at one row writes outer products out: no floor",
           CLI_TESTS),
]
