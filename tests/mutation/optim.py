"""Mutants of ``dualtape/optim.py``."""

from run_mutants import Mutant

P = "dualtape/optim.py"
T = ("tests/test_optim.py", "tests/test_optim_state.py", "tests/test_optim_chunks.py",
     "tests/test_optim_torch.py")
STALE = T + ("tests/test_stale_tapes.py",)
MUTANTS = [
    # a step that raises changes nothing
    Mutant(P, "        except BaseException:\n            self.steps -= 1\n            raise",
           "        except BaseException:\n            raise",
           "a step that fails after planning still counts", T),
    Mutant(P, "if g.shape != w.shape or g.dtype != w.dtype:", "if g.shape != w.shape:",
           "a gradient of another dtype is accepted", T),
    Mutant(P, "if group.keys() != grad.keys():", "if len(group) != len(grad):",
           "gradients under other names are accepted", T),
    Mutant(P, "        if grads and isinstance(grads[0], list | tuple):",
           "        if False:", "backward's whole result taken for the gradients", T),
    # the in-place paths and their choice
    Mutant(P, "for start in range(0, w.size, CHUNK):", "for start in range(0, w.size - 1, CHUNK):",
           "the chunked update drops a last chunk of one element", T),
    Mutant(P, "end = min(start + CHUNK, w.size)", "end = start + CHUNK",
           "the last chunk runs past the end", T),
    Mutant(P, "and not any(np.may_share_memory(w, a) for a in arrays[1:])", "",
           "an overlapping gradient is updated in passes", T),
    Mutant(P, "    if mod is np and not all(a.flags.writeable for a in (w, *slot.values())):\n"
              "        return None\n", "",
           "a read-only parameter is written in place", T),
    Mutant(P, "    if 0 in w.strides and any(", "    if False and any(",
           "a broadcast parameter is written in place", T),
    Mutant(P, "        return not self.momentum or \"m\" in slot", "        return True",
           "SGD momentum slots created in passes", T),
    Mutant(P, "                m = slot[\"m\"] = m.copy()", "                m = slot[\"m\"] = m",
           "the momentum slot is the scratch buffer", T),
    Mutant(P, "            mod.multiply(w, self.rate * self.regulariser, out=scratch)",
           "            mod.multiply(w, self.regulariser, out=scratch)",
           "in-place L2 forgets the rate", T),
    Mutant(P, "if scratch is None and not (self.momentum or self.regulariser) and (",
           "if scratch is None and not self.momentum and (",
           "BLAS axpy drops the L2 term", T + ("tests/test_blas.py",)),
    # state
    Mutant(P, "            if not _same_place(a, w):\n"
              "                a = slot[s] = move(a, backend_of(w))\n",
           "", "the state does not follow the network to its backend", T),
    Mutant(P, "        if slot:  # a stateless", "        if True:  # a stateless",
           "a stateless optimizer ties itself to a network", T),
    Mutant(P, 'f"{k}/{name}/{s}": np.array(to_numpy(a), copy=True)',
           'f"{k}/{name}/{s}": to_numpy(a)', "state_dict hands out the live state", T),
    Mutant(P, "np.array(value, dtype=dtype_name(w.dtype), copy=True)",
           "np.asarray(value, dtype=dtype_name(w.dtype))", "loaded state aliases the caller's", T),
    Mutant(P, 'if value.dtype.kind != "f":', 'if value.dtype.kind not in "fiu":',
           "integer state accepted", T),
    Mutant(P, "            if not np.all(np.isfinite(value)):", "            if False:",
           "NaN or infinite state loaded", T),
    Mutant(P, "if slot in self.non_negative and np.any(value < 0):",
           "if slot in self.non_negative and np.all(value < 0):",
           "a partly negative second moment loaded", T),
    Mutant(P, 'steps.dtype.kind not in "iu" or int(steps) < 0',
           'steps.dtype.kind not in "iu" or int(steps) <= 0', "a state of step 0 is refused", T),
    Mutant(P, "        if set(slots) != set(expected):",
           "        if not set(slots) <= set(expected):", "a state missing a slot is accepted", T),
    Mutant(P, "        if np.asarray(kind).ndim != 0 or str(np.asarray(kind)) != owner:",
           "        if np.asarray(kind).ndim != 0:", "another optimizer's state accepted", T),
    Mutant(P, "        state: dict[tuple[int, str], dict[str, Array]] = {}\n",
           "        state = self.state\n", "a refused load overwrites the live state", T),
    # hyperparameters
    Mutant(P, "    if not real or isinstance(value, bool | np.bool_) or not (",
           "    if not real or not (", "True accepted as a rate", T),
    Mutant(P, 'self.rate = _check_number("SGD", "rate", rate, 0.0, open_low=True)',
           'self.rate = _check_number("SGD", "rate", rate, 0.0)', "SGD rate 0 accepted", T),
    Mutant(P, 'self.eps = _check_number("Adam", "eps", eps, 0.0, open_low=True)',
           'self.eps = _check_number("Adam", "eps", eps, 0.0)', "Adam eps 0 accepted", T),
    # Adam's rule
    Mutant(P, "        return self.rate * root / (1.0 - self.beta1**self.steps), self.eps * root",
           "        return self.rate * root / (1.0 - self.beta1**self.steps), self.eps",
           "Adam adds eps before the bias correction (TensorFlow's form)", T),
    Mutant(P, "        root = math.sqrt(1.0 - self.beta2**self.steps)",
           "        root = math.sqrt(1.0 - self.beta2 ** (self.steps + 1))",
           "Adam's second-moment correction one step ahead", T),
    Mutant(P, "        return w - (m / (xp.sqrt(v) + eps)) * step, {\"m\": m, \"v\": v}",
           "        return w - (m / xp.sqrt(v + eps)) * step, {\"m\": m, \"v\": v}",
           "generic Adam puts eps under the root", T),
    Mutant(P, "            v = slot[\"v\"] = mod.multiply(mod.multiply(g, 1.0 - self.beta2), g)",
           "            v = slot[\"v\"] = mod.multiply(g, 1.0 - self.beta2)",
           "Adam's first in-place second moment not squared", T),
    Mutant(P, "mod.add(mod.multiply(m, self.beta1, out=m),",
           "mod.add(mod.multiply(m, 1.0 - self.beta1, out=m),",
           "Adam's in-place first moment decays by 1 - beta1", T),
    # versions
    Mutant(P, "            if isinstance(group, ParamDict):  # tapes made before this step are now "
              "stale\n                group.touch()\n", "",
           "an in-place step leaves the tapes' version", STALE),
]
