"""Mutants of ``dualtape/io.py`` (save/load), ``dualtape/zip_reader.py`` (its bounded reader)
and of train-text's fallback save."""

from run_mutants import Mutant

IO = "dualtape/io.py"
READER = "dualtape/zip_reader.py"
REGISTRY = "dualtape/layers/registry.py"
REGISTER_TESTS = ("tests/test_register_layer.py",)
TRAINER = "dualtape/text/trainer.py"
TESTS = ("tests/test_io.py", "tests/test_io_safety.py", "tests/test_io_destination.py")
FALLBACK_TESTS = ("tests/test_io_destination.py", "tests/test_text_safety.py")
INITIAL = "dualtape/layers/initial.py"
RESHAPE = "dualtape/layers/reshape.py"
SPATIAL = "dualtape/layers/spatial.py"
MEMORY_TESTS = ("tests/test_io_memory.py",)
SETTINGS_TESTS = ("tests/test_io_settings.py", "tests/test_io.py")


def io(old: str, new: str, why: str) -> Mutant:
    return Mutant(IO, old, new, why, TESTS)


def reader(old: str, new: str, why: str) -> Mutant:
    return Mutant(READER, old, new, why, TESTS)


def fallback(old: str, new: str, why: str) -> Mutant:
    return Mutant(TRAINER, old, new, why, FALLBACK_TESTS)


MUTANTS = [
    # --- the header ---------------------------------------------------------------------------
    io("or version < 1:", "or version < 0:", "format version 0 accepted"),
    io("not isinstance(version, int) or isinstance(version, bool)", "not isinstance(version, int)",
       "a boolean version accepted"),
    io("if version > FORMAT_VERSION:", "if version > FORMAT_VERSION + 1:",
       "a version newer than this dualtape accepted"),
    io('header.get("format") != FORMAT', 'header.get("format") is None',
       "any format name accepted"),
    io('if not isinstance(header.get("extra", {}), dict):', "if False:",
       "extra values that are not a mapping accepted"),
    io("if not isinstance(params, dict) or set(params) != set(shapes):",
       "if not isinstance(params, dict) or not set(shapes) <= set(params):",
       "a header declaring a parameter the layer does not have accepted"),
    io("        if params[name] != list(shape):", "        if False:",
       "the header's parameter shapes not compared with the layer's sizes"),
    io('ok = name.startswith("extra/") and array_dtype.kind in ARRAY_KINDS',
       "ok = array_dtype.kind in ARRAY_KINDS",
       "the array table may redeclare a layer's parameter"),
    io("and array_dtype.kind in ARRAY_KINDS \\\n", "and True \\\n",
       "the array table may declare object arrays"),
    reader("isinstance(n, int) and not isinstance(n, bool) and n >= 0",
       "isinstance(n, int) and not isinstance(n, bool) and n > 0",
       "empty dimensions refused"),
    # --- the zip directory ---------------------------------------------------------------------
    reader("        if member in names:\n", "        if False:\n", "a member named twice accepted"),
    reader("if info.flag_bits & UNSUPPORTED_FLAGS:", "if info.flag_bits & 0x40:",
       "encrypted members reach zipfile (RuntimeError)"),
    reader("if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):",
       "if info.compress_type not in (0, 8, 12, 14):",
       "bzip2 and lzma members read (their ratio is unbounded)"),
    reader("if info.file_size > capacity(info) or stored",
       "if info.file_size > 2 * capacity(info) or stored",
       "a member may claim more than its compressed bytes can produce"),
    reader("stored and info.file_size != info.compress_size",
       "stored and info.file_size > info.compress_size",
       "a stored member shorter than its compressed size accepted"),
    reader("ratio = 1 if info.compress_type == zipfile.ZIP_STORED else DEFLATE_RATIO",
       "ratio = DEFLATE_RATIO", "stored members counted as if they could inflate"),
    reader("    if compressed > file_size:\n", "    if False:\n",
       "compressed sizes beyond the file's size accepted"),
    reader("UNREADABLE = (zipfile.BadZipFile, EOFError, OSError, ValueError, NotImplementedError,",
       "UNREADABLE = (zipfile.BadZipFile, EOFError, OSError, ValueError,",
       "zipfile's NotImplementedError escapes"),
    reader("    except UNREADABLE as exc:\n", "    except zipfile.BadZipFile as exc:\n",
       "zlib, EOF and npy errors escape as tracebacks"),
    # --- members --------------------------------------------------------------------------------
    io("        if wanted > room:\n", "        if False:\n",
       "the header's total size not bounded by what the members can hold"),
    io('and "arrays" not in header \\\n', "\\\n",
       "undeclared stored extra members accepted in new files"),
    io("and info.compress_type == zipfile.ZIP_STORED:\n", ":\n",
       "undeclared compressed extra members accepted in old files"),
    reader("    if info.file_size > limit + NPY_HEADER_LIMIT:\n", "    if False:\n",
       "a member larger than its declaration is inflated"),
    reader("if spec is not None and (dtype != spec.dtype or shape != spec.shape):",
       "if spec is not None and (dtype != spec.dtype or math.prod(shape) != math.prod("
       "spec.shape)):", "an array of the declared size but another shape accepted"),
    reader("if spec is not None and (dtype != spec.dtype or shape != spec.shape):",
       "if spec is not None and shape != spec.shape:",
       "an array of the declared shape but another dtype accepted"),
    reader("        if dtype.kind not in ARRAY_KINDS:\n            kind =",
       "        if dtype.hasobject:\n            kind =", "records in old files' extras read"),
    reader("        if reader.count + size != info.file_size:\n", "        if False:\n",
       "an .npy header claiming more data than its member holds is allocated"),
    reader("    if version not in ((1, 0), (2, 0)):\n", "    if version[0] > 3:\n",
       "npy format 3.0 read as 2.0"),
    reader("read(min(n, self.left + 1))", "read(min(n, self.left))",
       "the bounded reader cannot notice a stream longer than allowed"),
    reader("        if not chunk:\n", "        if False:\n",
       "a stream ending early loops forever"),
    reader("    return flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)",
       "    return flat.reshape(shape)", "Fortran-ordered arrays read in C order"),
    io("    for name, spec in declared.items():\n        if name not in arrays:",
       "    for name, spec in {}.items():\n        if name not in arrays:",
       "a declared member that is missing not noticed"),
    # --- what save refuses ----------------------------------------------------------------------
    io("if type(net) not in NETWORK_KINDS.values():",
       "if type(net).__name__ not in NETWORK_KINDS:", "a subclass named Network saved"),
    io("    if type(layer) is not kind:", "    if not isinstance(layer, kind):",
       "a layer subclass saved as its base"),
    io("    if set(layer.params) != set(expected):",
       "    if not set(expected) <= set(layer.params):",
       "a layer with an extra parameter saved"),
    io("host is None or host.shape != shape or host.dtype != np.dtype(dtype)",
       "host is None or host.dtype != np.dtype(dtype)",
       "a parameter of another shape saved"),
    io("host is None or host.shape != shape or host.dtype != np.dtype(dtype)",
       "host is None or host.shape != shape",
       "a parameter of another dtype saved"),
    io("        type(net)(net.layers)  # the checks", "        list(net.layers)  # the checks",
       "layers whose sizes no longer chain saved"),
    io('if not isinstance(name, str) or "\\0" in name:', "if not isinstance(name, str):",
       "an extra name with NUL saved (zip cuts it)"),
    io("isinstance(value, np.ndarray) and not isinstance(value, np.ma.MaskedArray)",
       "isinstance(value, np.ndarray)", "a masked array saved without its mask"),
    io("            if value.dtype.kind not in ARRAY_KINDS:",
       "            if value.dtype.hasobject:",
       "a structured (void) extra array saved"),
    io("            if not isinstance(key, str):\n                return (",
       "            if False:\n                return (", "non-string keys in extra saved"),
    io("if isinstance(value, dict | list | tuple) and depth == 0:",
       "if isinstance(value, dict | list | tuple) and depth < 0:",
       "extra nested one level deeper than allowed saved"),
    io("    if isinstance(value, list | tuple):\n        for i, item",
       "    if isinstance(value, list):\n        for i, item",
       "tuples in extra not looked into"),
    io("    except ValueError as exc:  # integers", "    except KeyError as exc:  # integers",
       "an integer too long for JSON escapes as ValueError"),
    io("        if clash is not None:\n", "        if False:\n",
       "optimizer= silently overwrites extra's optimizer entries"),
    io("if name not in params or tuple(params[name].shape) != value.shape:",
       "if name not in params:", "another network's optimizer state saved"),
    io('for m in ("state_dict", "load_state_dict")):', 'for m in ()):',
       "save accepts something that is not an optimizer"),
    # --- loading onto backends, optimizers ------------------------------------------------------
    io("    if backend is None and device is None:\n        net.to(get_backend())",
       "    if backend is None and device is None:\n        pass",
       "load ignores the selected backend"),
    io("    if not flat:\n        raise ValueError", "    if False:\n        raise ValueError",
       "a file without optimizer state resets the optimizer silently"),
    io("    extra = _extra(header, arrays)\n    if optimizer is not None:\n"
       "        _restore_optimizer(optimizer, extra, net, path)\n    return net, extra",
       "    extra = _extra(header, arrays)\n    return net, extra",
       "load(optimizer=) restores nothing"),
    io('not callable(\n            getattr(optimizer, "load_state_dict", None)):',
       'not callable(\n            getattr(optimizer, "load_state_dict", print)):',
       "load accepts something that is not an optimizer"),
    io('        raise ValueError(f"{path}: its optimizer state does not fit: {exc}") from None',
       "        raise", "an optimizer refusal does not name the path"),
    io("        raise ValueError(f\"{path}: {exc}\") from exc\n    except (TypeError",
       "        raise\n    except (TypeError", "a rebuild error does not name the path"),
    # --- a layer's settings: one check for load and save -----------------------------------------
    Mutant(IO, '    expected = _checked_settings(kind, config, dtype, where, "save")',
           "    expected = kind.param_shapes(config)", "save skips the settings check load makes",
           SETTINGS_TESTS),
    Mutant(IO, "                kind.from_config(config, dtype)\n", "                pass\n",
           "the settings check builds no layer (a constructor's refusal not seen)",
           SETTINGS_TESTS),
    Mutant(IO, "        if not kind.composite:\n            with use_backend",
           "        if True:\n            with use_backend",
           "composites built from settings they do not take", SETTINGS_TESTS),
    Mutant(IO, "        config = json.loads(json.dumps(layer.config()))  # what load will read",
           "        config = layer.config()",
           "settings JSON cannot hold fail later, naming no layer", SETTINGS_TESTS),
    Mutant(RESHAPE, "    shape_out = Setting(check_shape)\n", "",
           "Reshape's shape_out not checked when assigned", SETTINGS_TESTS),
    Mutant(SPATIAL, "        layer.__dict__[self.name] = self.check(layer.kind, self.name, value)",
           "        layer.__dict__[self.name] = value",
           "a setting assigned after construction not checked",
           ("tests/test_io_settings.py", "tests/test_pooling.py")),
    # --- load's peak memory ------------------------------------------------------------------
    Mutant(IO, "    with placeholder_params():\n        layer = kind.from_config",
           "    with contextlib.nullcontext():\n        layer = kind.from_config",
           "load draws weights only to replace them", MEMORY_TESTS),
    Mutant(READER, "    flat = np.frombuffer(buffer, dtype=dtype)\n",
           "    flat = np.frombuffer(buffer, dtype=dtype).copy()\n",
           "load copies every member once more", MEMORY_TESTS),
    Mutant(INITIAL, "    if _PLACEHOLDERS.get():", "    if False:",
           "placeholder_params draws weights all the same", MEMORY_TESTS),
    Mutant(INITIAL, "        _PLACEHOLDERS.reset(token)", "        pass",
           "layers built after placeholder_params still get placeholders", MEMORY_TESTS),
    # --- train-text's fallback ------------------------------------------------------------------
    fallback("for where, replace in ((path, True), (nearby, False)):",
             "for where, replace in ((path, True), (nearby, True)):",
             "the fallback next to the destination follows a planted link"),
    fallback('nearby = path.with_name(f"{name}.{secrets.token_hex(4)}{suffix}")',
             'nearby = path.with_name(f"{name}{suffix}")',
             "the fallback next to the destination has a predictable name"),
    fallback('folder = Path(tempfile.mkdtemp(prefix=f"dualtape-{name}."))',
             "folder = Path(tempfile.gettempdir())",
             "the last fallback writes a predictable name in the shared temporary folder"),
    fallback("            with contextlib.suppress(OSError):\n                folder.rmdir()",
             "            with contextlib.suppress(OSError):\n                pass",
             "a failed last fallback leaves its empty folder"),
    # --- layers of your own (layers/registry.py) ---------------------------------------------
    Mutant(REGISTRY, "    LAYER_KINDS[kind] = cls\n", "", "register_layer registers nothing",
           REGISTER_TESTS),
    Mutant(REGISTRY, "    if known is not None and known is not cls:", "    if False:",
           "a registered class takes a built-in's kind", REGISTER_TESTS),
    Mutant(REGISTRY, "    if cls.composite:", "    if False:",
           "a composite of one's own registered", REGISTER_TESTS),
]
