"""Mutants of the composite layers (``dualtape/layers/composite.py``, ``sequential.py``,
``branches.py``, ``merge.py``, ``concat.py``, ``chain.py``), of how networks hold them and
of their save/load.

Killed 0 of 31 by the suite before the composite tests (``DUALTAPE_MUTANTS_BEFORE=1``), 31 of
31 with them (2026-12-01)."""

import os

from run_mutants import Mutant

COMPOSITE = "dualtape/layers/composite.py"
BRANCHES = "dualtape/layers/branches.py"
SEQUENTIAL = "dualtape/layers/sequential.py"
MERGE = "dualtape/layers/merge.py"
CONCAT = "dualtape/layers/concat.py"
CHAIN = "dualtape/layers/chain.py"
BASE = "dualtape/layers/base.py"
NETWORK = "dualtape/network.py"
IO = "dualtape/io.py"
EXISTING = ("tests/test_network.py", "tests/test_io.py", "tests/test_spatial.py",
            "tests/test_stale_tapes.py")
# DUALTAPE_MUTANTS_BEFORE=1: the suite as it was before the composite tests were written
TESTS = EXISTING if os.environ.get("DUALTAPE_MUTANTS_BEFORE") else \
    (*EXISTING, "tests/test_compose.py", "tests/test_compose_io.py")
MUTANTS = [
    Mutant(BRANCHES, "        dx = d if dx is None else dx + d", "        dx = d",
           "branch gradients not summed for the shared input", TESTS),
    Mutant(BRANCHES, "        grads.extend(groups)", "        grads[:0] = groups",
           "branch gradients in the wrong order for param_groups", TESTS),
    Mutant(CONCAT, "            start += size", "            start = size",
           "concat's gradient split at the wrong index", TESTS),
    Mutant(CONCAT, "xp.concat(outputs, axis=1)", "xp.concat(outputs, axis=-1)",
           "concatenated along width, not channels", TESTS),
    Mutant(COMPOSITE, "        return [leaf for child in self.children for leaf in child.leaves()]",
           "        return list(self.children)",
           "a nested composite's layers missing from the optimizer", TESTS),
    Mutant(NETWORK, "        return [leaf.params for leaf in self.leaves()]",
           "        return [layer.params for layer in self.layers]",
           "a branch's params missing from net.params", TESTS),
    Mutant(NETWORK, "        for layer in self.leaves():\n            moved",
           "        for layer in self.layers:\n            moved",
           "net.to leaves a branch's parameters behind", TESTS),
    Mutant(NETWORK, "        for layer in self.leaves():\n            if hasattr(layer, \"tr",
           "        for layer in self.layers:\n            if hasattr(layer, \"tr",
           "set_training misses a Dropout inside a branch", TESTS),
    Mutant(BASE, "    return tape_array(first) if isinstance(first, tuple) else first",
           "    return first", "a composite's tape gives no reference array for dy", TESTS),
    Mutant(SEQUENTIAL, "        return self.children[-1]._output_shape(tape.tapes[-1])",
           "        return self.children[0]._output_shape(tape.tapes[0])",
           "Sequential checks dy against its first layer's output", TESTS),
    Mutant(CONCAT, "        return (shape[0], sum(tape.sizes), *shape[2:])",
           "        return shape", "Concat checks dy against branch 0's output", TESTS),
    Mutant(MERGE, "            if result is not None and not fits(s, result):",
           "            if False:", "Merge accepts branches of different shapes", TESTS),
    Mutant(CONCAT, "            if len(s) != len(first) or not fits(s[1:], first[1:]):",
           "            if len(s) != len(first) or not fits(s[2:], first[2:]):",
           "Concat compares too few axes", TESTS),
    Mutant(CONCAT, "        joined = sum(sizes) if", "        joined = sizes[0] if",
           "Concat states branch 0's size as its output's", TESTS),
    Mutant(MERGE, "            if tuple(y.shape) != tuple(outputs[0].shape):", "            if 0:",
           "Merge broadcasts outputs of different sizes", TESTS),
    Mutant(CONCAT, "or tuple(y.shape[2:]) != first[2:] or", "or",
           "Concat's runtime check of the other axes dropped", TESTS),
    Mutant(BRANCHES, "        elif not fits(shape, wanted):", "        elif False:",
           "branches that take different inputs accepted", TESTS),
    Mutant(COMPOSITE, "        check_same_params(self.leaves(), self.kind)\n", "",
           "a composite mixes backends", TESTS),
    Mutant(CHAIN, "        seen.add(id(layer))\n", "",
           "a layer with parameters accepted twice", TESTS),
    Mutant(COMPOSITE, "            if child.recurrent:", "            if False:",
           "a recurrent layer accepted in a branch", TESTS),
    Mutant(COMPOSITE, "or len(inner) != len(self.children):",
           "or len(inner) < len(self.children):",
           "a composite tape with extra branch tapes gets no clear error", TESTS),
    Mutant(COMPOSITE, "            child._check_tape(t, f\"{owner} (inside {self.kind})\")",
           "            pass", "a branch's tape not checked", TESTS),
    Mutant(COMPOSITE, "        self.keeps_input = any(c.keeps_input for c in self.children)",
           "        self.keeps_input = all(c.keeps_input for c in self.children)",
           "a branch's tape shares the caller's input", TESTS),
    Mutant(COMPOSITE, "        if depth(self) > COMPOSITE_DEPTH:", "        if depth(self) > "
           "COMPOSITE_DEPTH + 1:", "composites nest one deeper than allowed", TESTS),
    Mutant(IO, "    if depth >= COMPOSITE_DEPTH:", "    if depth > COMPOSITE_DEPTH:",
           "load reads one level more than allowed before refusing", TESTS),
    Mutant(IO, "            params = groups[int(k)] if", "            params = net.layers[int(k)]"
           ".params if", "optimizer state of a branch checked against the wrong layer", TESTS),
    Mutant(IO, "for i, child in enumerate(spec[\"layers\"])])",
           "for i, child in enumerate(spec[\"layers\"][:2])])",
           "load ignores a nested layer", TESTS),
    Mutant(IO, "        _declare_layer(child, f\"{where}.{i}\", dtype, declared, path, depth + 1)",
           "        pass", "load does not check a nested layer's parameters", TESTS),
    Mutant(IO, "    if kind.composite != (children is not None):",
           "    if kind.composite and children is None:",
           "a plain layer's entry may list layers", TESTS),
    Mutant(IO, "    if kind.composite and config:", "    if False:",
           "a composite's entry may carry sizes", TESTS),
    Mutant(IO, "        spec[\"layers\"] = [_layer_spec(child, f\"{where}.{i}\", dtype, arrays)",
           "        spec[\"layers\"] = [_layer_spec(child, f\"{where}\", dtype, arrays)",
           "save writes nested parameters under one name", TESTS),
    Mutant(SEQUENTIAL, "        super().__init__(as_layers(layers, self.kind, self.child_word))",
           "        super().__init__(list(layers))",
           "a Sequential takes a list or a Network inside it as is", TESTS),
    Mutant(BRANCHES, "        super().__init__(as_layers(branches, self.kind, self.child_word))",
           "        super().__init__(list(branches))",
           "a branch given as a list of layers or a Network taken as is", TESTS),
]
