"""Mutants of ``dualtape/gradcheck.py`` and ``dualtape/recompute_check.py``."""

from run_mutants import Mutant

P = "dualtape/gradcheck.py"
TESTS = ("tests/test_gradcheck.py",)
RECOMPUTE = "dualtape/recompute_check.py"
RECOMPUTE_TESTS = ("tests/test_recompute_check.py", "tests/test_layers.py")
MUTANTS = [
    Mutant(P, "        x[i] = old - eps\n        down = f(x)\n        x[i] = old\n"
              "        grad[i] = (up - down) / (2 * eps)",
           "        x[i] = old\n        down = f(x)\n        grad[i] = (up - down) / eps",
           "forward differences instead of central ones", TESTS),
    Mutant(P, "            finally:\n                params[key] = original",
           "            finally:\n"
           "                params[key] = from_host(_host64(original), place)",
           "a parameter put back as a copy, not the array the layer held", TESTS),
    Mutant(P, "            finally:\n                params[key] = original",
           "            finally:\n                pass", "a perturbed parameter left in place",
           TESTS),
    Mutant(P, "    flat = int(np.argmax(ratio))", "    flat = int(np.argmin(ratio))",
           "the best entry's index reported as the worst", TESTS),
    Mutant(P, "    ratio = np.where(np.isfinite(ratio), ratio, np.inf)\n", "",
           "a NaN gradient passes (NaN compares false)", TESTS),
    Mutant(P, "    return np.abs(found - expected) / (np.abs(expected) + atol / rtol)",
           "    return np.abs(found - expected) / (np.abs(expected) + atol)",
           "the relative error's floor is atol, not atol / rtol", TESTS),
    Mutant(P, "        if not worst <= rtol:", "        if worst > 100 * rtol:",
           "the tolerance a hundred times too loose", TESTS),
    Mutant(P, "        failures.sort(key=lambda f: -f[0])", "",
           "the first failing array named, not the worst", TESTS),
    Mutant(P, "    if dtypes:\n", "    if False:\n", "float32 models checked", TESTS),
    Mutant(P, "        return float(np.sum(_host64(ys) * r)\n"
              "                     + sum(np.sum(_host64(s) * q) for s, q in zip(final, qs, "
              "strict=True)))",
           "        return float(np.sum(_host64(ys) * r))",
           "the final states left out of the objective, though backward is given their "
           "projection", TESTS),
    Mutant(P, "        if leaves == [layer]:", "        if True:",
           "a composite layer's parts taken as one parameter dict",
           ("tests/test_compose.py",)),
    Mutant(P, "        if set(grads) != set(params):", "        if False:",
           "gradients of other keys than the parameters' go unnoticed", TESTS),
    Mutant(RECOMPUTE, "    if again:\n", "    if False:\n", "a recomputing backward passes",
           RECOMPUTE_TESTS),
    Mutant(RECOMPUTE, "        layer._backward(backward, tape, xp.ones_like(y))",
           "        layer._backward(xp, tape, xp.ones_like(y))",
           "backward's calls not counted", RECOMPUTE_TESTS),
    Mutant(RECOMPUTE, "for name, n in forward.calls.items() if n}",
           "for name, n in forward.calls.items()}",
           "functions the forward pass never evaluated reported", RECOMPUTE_TESTS),
]
