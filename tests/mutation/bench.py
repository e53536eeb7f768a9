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
REPORT = "dualtape/benchmarks/report.py"
OUTPUT = "dualtape/benchmarks/output.py"
COMPARE = "bench/compare_devices.py"


def _cli(old: str, new: str, why: str) -> Mutant:
    return Mutant(CLI, old, new, why, CLI_TESTS)


def _measure(old: str, new: str, why: str) -> Mutant:
    return Mutant(MEASURE, old, new, why, TIMING_TESTS)


def _report(old: str, new: str, why: str) -> Mutant:
    return Mutant(REPORT, old, new, why, REPORT_TESTS)


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
    _cli("where = int(device) if device.isdigit() else device or None",
         "where = device or None", "a device index given as a string (cupy:1)"),
    _cli("    if not backends:\n        raise _refused(\"none of the requested",
         "    if not backends and not unavailable:\n        raise _refused(\"none of the requested",
         "only unavailable backends: nothing to time, yet no refusal"),
    _cli('    if names == ["none"]:', '    if "none" in names:', "'none' inside a list accepted"),
    _cli("return found, [] if torch else [NO_TORCH]", "return found, []",
         "no note when the torch reference rows are missing"),
    _cli("    if needs_torch and not torch:", "    if False:",
         "a torch reference without torch said to be unknown"),
    _cli("    if unknown:\n        raise _refused(f\"unknown references",
         "    if unknown and len(names) == 1:\n        raise _refused(f\"unknown references",
         "an unknown reference in a list ignored"),
    _cli("    return [r for r in found if r.label in names], []", "    return found, []",
         "a list of references runs all of them"),
    _cli("    if not chosen:\n        raise _refused(\"--quick leaves", "    if False:\n"
         "        raise _refused(\"--quick leaves", "--quick leaving no workload not refused"),
    _cli("if set(dtypes) - set(DTYPES):", "if set(DTYPES) - set(dtypes):",
         "dtype check the wrong way round (float16 accepted, float32 alone refused)"),
    _cli("        if n < 1:", "        if n < 0:", "--threads 0 accepted"),
    _cli("        require_threadpoolctl()\n    return n", "    return n",
         "--threads without threadpoolctl found only when timing starts"),
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
    # --- workloads and timing (measure.py) ------------------------------------------------
    _measure("{w.group, w.name, w.key} & set(names)", "{w.group, w.key} & set(names)",
             "a workload's bare name not accepted"),
    _measure("not (quick and w.batch > 32)", "not (quick and w.batch >= 32)",
             "--quick drops batch 32"),
    _measure("    if unknown:\n        raise ValueError(f\"unknown workloads",
             "    if unknown and not chosen:\n        raise ValueError(f\"unknown workloads",
             "an unknown workload beside a known one ignored"),
    _measure("for _ in range(timing.warmup - 1):", "for _ in range(timing.warmup):",
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
    _measure("            if result.error is None:\n                try:",
             "            if True:\n                try:",
             "a case that failed is still timed in later rounds"),
    _measure("                except Exception as exc:\n                    result.error",
             "                except ZeroDivisionError as exc:\n                    result.error",
             "a failure in a timed round stops every other row"),
    _measure("        sync()\n        return (time.perf_counter() - start) / number",
             "        return (time.perf_counter() - start) / number",
             "the clock stops before the device has finished"),
    _measure("        sync()\n        start = time.perf_counter()",
             "        start = time.perf_counter()",
             "the clock starts while earlier work is still queued"),
    _measure("                torch.set_num_threads(previous)\n", "                pass\n",
             "torch's thread count not restored"),
    _measure("    if n < 1:\n        raise ValueError(f\"a thread limit", "    if n < 0:\n"
             "        raise ValueError(f\"a thread limit", "limited_threads(0) accepted"),
    _measure("1e3 * float(np.median(self.samples))", "1e3 * float(np.mean(self.samples))",
             "the mean reported as the median"),
    _measure("return backend.name if backend.device == default else",
             "return backend.name if backend.device != default else",
             "row labels with the device the wrong way round"),
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
    # --- compare_devices.py ---------------------------------------------------------------
    Mutant(COMPARE, "    return done.status", "    return 0",
           "compare_devices: exit status 0 when a file was not written", REPORT_TESTS),
    Mutant(COMPARE, "    if args.rerun_without_openblas_env:\n        found.append",
           "    if not args.rerun_without_openblas_env:\n        found.append",
           "compare_devices: the OpenBLAS re-run section the wrong way round", REPORT_TESTS),
]
