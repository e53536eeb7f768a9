"""Mutants of ``dualtape/backend.py``: selection, device checks, mixing, dtype names."""

from run_mutants import Mutant

TESTS = ("tests/test_backend.py", "tests/test_backend_devices.py")
PATH = "dualtape/backend.py"


def _m(old: str, new: str, why: str) -> Mutant:
    return Mutant(PATH, old, new, why, TESTS)


MUTANTS = [
    # --- selection: env < set_backend < use_backend -------------------------------------
    _m("    chosen = _context_choice.get()\n    if chosen is not None:\n        return chosen\n"
       "    if _global_choice is None:",
       "    chosen = _context_choice.get()\n    if chosen is not None and _global_choice is None:\n"
       "        return chosen\n    if _global_choice is None:",
       "set_backend wins over use_backend"),
    _m("            _global_choice = resolve_backend(name)\n",
       "            return resolve_backend(name)\n",
       "the environment variable read again at every call"),
    _m('name = os.environ.get("DUALTAPE_BACKEND") or "numpy"',
       'name = os.environ.get("DUALTAPE_BACKEND", "numpy")',
       "an empty DUALTAPE_BACKEND is an unknown backend"),
    _m('raise ValueError(f"environment variable DUALTAPE_BACKEND: {exc}") from None',
       "raise", "an unknown DUALTAPE_BACKEND not said to come from the environment"),
    _m("        _context_choice.reset(token)", "        _context_choice.set(None)",
       "leaving a nested use_backend forgets the outer one"),
    _m("    try:\n        yield choice\n    finally:\n"
       "        _context_choice.reset(token)",
       "    yield choice\n    _context_choice.reset(token)",
       "an exception inside use_backend keeps its backend"),
    _m("    global _global_choice\n    _global_choice = resolve_backend(name, device)\n"
       "    return _global_choice",
       "    global _global_choice\n    _global_choice = None\n"
       "    _global_choice = resolve_backend(name, device)\n    return _global_choice",
       "a failed set_backend forgets the previous choice"),
    _m('        name = "cupy" if "cupy" in available_backends() else "numpy"',
       '        name = "numpy"', "auto never picks cupy"),
    # --- device checks ------------------------------------------------------------------
    _m('    if device != "cpu":\n        raise ValueError(f"backend \'numpy\'',
       '    if device not in ("cpu", 0):\n        raise ValueError(f"backend \'numpy\'',
       "numpy accepts the device index 0"),
    _m("            return device if isinstance(device, xp.Device) else xp.Device(str(device))",
       "            return device", "array_api_strict keeps a device name as a string"),
    _m("        return _torch_device(device)",
       "        return importlib.import_module(\"torch\").device(device)",
       "torch devices not checked at all"),
    _m("    if not torch.backends.cuda.is_built():\n", "    if False:\n",
       "a CPU-only torch not said to be built without CUDA"),
    _m("    if count == 0:\n        raise BackendUnavailable(f\"{where}: torch finds",
       "    if count < 0:\n        raise BackendUnavailable(f\"{where}: torch finds",
       "no CUDA device not said"),
    _m("    if chosen.index >= count:", "    if chosen.index > count:",
       "cuda:N with N GPUs accepted (off by one)"),
    _m('        return torch.device("cuda", torch.cuda.current_device())',
       "        return chosen", "'cuda' not made the current device, as arrays report it"),
    _m("    elif chosen.type == \"mps\" and not torch.backends.mps.is_available():",
       "    elif False:", "mps without MPS not said"),
    _m('if built else "torch was built without MPS"', 'if not built else '
       '"torch was built without MPS"', "the two MPS reasons swapped"),
    _m("        if chosen.index not in (None, 0):", "        if False:",
       "cpu:1 accepted as another device"),
    _m("    if chosen.type == \"meta\":\n", "    if False:\n",
       "the meta device accepted"),
    _m("    try:\n        torch.empty(0, device=chosen)\n    except Exception as exc:  # a "
       "device type torch knows but cannot use here\n        raise BackendUnavailable(f\"{where} "
       "does not work here: {exc}\") from exc\n", "",
       "a device torch knows but cannot use accepted (xpu)"),
    _m("    except RuntimeError:\n        raise ValueError(f\"backend 'torch': {device!r} is not",
       "    except TypeError:\n        raise ValueError(f\"backend 'torch': {device!r} is not",
       "a malformed torch device leaks torch's RuntimeError"),
    _m("""        device = f"cuda:{_index(device, 'torch')}\"""",
       """        device = _index(device, 'torch')""",
       "a torch device index handed to torch.device as it is"),
    _m("return isinstance(device, int | np.integer) and not isinstance(device, bool)",
       "return isinstance(device, int | np.integer)", "True taken as device index 1"),
    _m("    if device < 0:\n        raise ValueError(f\"backend {name!r}: a device index",
       "    if device < -1:\n        raise ValueError(f\"backend {name!r}: a device index",
       "device index -1 accepted"),
    _m("    if index >= count:\n        raise BackendUnavailable(f\"backend 'cupy' has no device",
       "    if index > count:\n        raise BackendUnavailable(f\"backend 'cupy' has no device",
       "CuPy device index == count accepted (off by one)"),
    _m("    elif _is_index(device):\n        index = _index(device, \"cupy\")\n    else:",
       "    elif isinstance(device, str):\n        index = int(device)\n    else:",
       "CuPy takes a device name, not an index"),
    # --- mixing backends and devices ----------------------------------------------------
    _m("    if len(names) != 1:\n        raise TypeError(f\"arrays of several backends",
       "    if len(names) > 2:\n        raise TypeError(f\"arrays of several backends",
       "two backends mixed in one call accepted"),
    _m('    if backend_name_of(a) == backend_name_of(reference) == "numpy":\n        return',
       '    if backend_name_of(a) == "numpy":\n        return',
       "a strict array checked against a numpy one passes"),
    _m("    if mine.device != theirs.device:\n        raise ValueError(",
       "    if False:\n        raise ValueError(", "two devices of one backend mixed"),
    _m("    if mine.name != theirs.name:\n        raise TypeError(",
       "    if mine.name != theirs.name:\n        raise ValueError(",
       "another backend raises ValueError, not TypeError"),
    _m('f"{what} is a {describe(a)} but {owner} lives on {describe(reference)}; "\n'
       '            f"move one of them (dualtape.asarray',
       'f"{what} is a {describe(a)}; "\n            f"move one of them (dualtape.asarray',
       "the error names only one of the two backends"),
    _m("    if here.name == backend.name and here.device == backend.device:",
       "    if here.name == backend.name:", "move ignores the device"),
    # --- dtype names --------------------------------------------------------------------
    _m("    if name not in FLOAT_DTYPES:\n        raise ValueError(f\"dtype must be",
       "    if name not in (*FLOAT_DTYPES, \"float16\"):\n"
       "        raise ValueError(f\"dtype must be",
       "float16 accepted"),
    _m('        name = str(dtype).rsplit(".", 1)[-1]', "        name = str(dtype)",
       "torch.float32 not recognised"),
    _m("    if isinstance(dtype, type) and issubclass(dtype, np.generic):",
       "    if False:", "np.float32 (a scalar type) refused"),
    # --- host generator -----------------------------------------------------------------
    _m("or isinstance(seed, bool) or seed < 0", "or isinstance(seed, bool) or seed <= 0",
       "seed 0 refused"),
]
