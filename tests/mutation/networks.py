"""Mutants of ``dualtape/network.py``, ``dualtape/recurrent.py`` and the training functions in
``dualtape/training.py``."""

from run_mutants import Mutant

NET, REC = "dualtape/network.py", "dualtape/recurrent.py"
CHAIN = "dualtape/layers/chain.py"
TRAIN = "dualtape/training.py"
FF = ("tests/test_network.py", "tests/test_losses.py")
RNN = ("tests/test_recurrent.py", "tests/test_gradient_buffers.py", "tests/test_aliasing.py")
STALE = ("tests/test_stale_tapes.py",)
PREDICT = ("tests/test_predict_sequence.py",)
MUTANTS = [
    Mutant(TRAIN, "    if x.shape[0] == 0:\n        raise ValueError(f\"{where}: the batch is "
                  "empty", "    if False:\n        raise ValueError(f\"{where}: the batch is empty",
           "train on an empty batch not refused", FF),
    Mutant(NET, "                layer.params.update(moved)",
           "                dict.update(layer.params, moved)",
           "to() moves the arrays but leaves the version", STALE),
    Mutant(NET, "            if any(moved[k] is not v for k, v in layer.params.items()):",
           "            if True:", "to() onto where the network is makes its tapes stale",
           STALE),
    Mutant(NET, "            if any(moved[k] is not v for k, v in layer.params.items()):",
           "            if False:", "to() moves nothing", FF + RNN),
    Mutant(CHAIN, "            if dtype_name(p.dtype) != dtype_name(first[2].dtype) or "
                "describe(p) != describe(",
           "            if describe(p) != describe(", "layers of two dtypes accepted", FF),
    Mutant(TRAIN, "    if isinstance(optimizer, type) or not callable(getattr(optimizer, "
                "\"step\", None)):",
           "    if not callable(getattr(optimizer, \"step\", None)):",
           "the optimizer class accepted for an optimizer", FF),
    Mutant(NET, "            if layer.recurrent:\n"
                "                raise TypeError(f\"Network: layer",
           "            if False:\n                raise TypeError(f\"Network: layer",
           "a Network takes a recurrent layer", FF),
    Mutant(TRAIN, "    if not local[1]:\n", "    if False:\n",
           "a non-finite input with a finite loss updates", FF + RNN),
    Mutant(TRAIN, "    check_loss_for(loss, net.layers[-1], net.n_out, where)\n", "",
           "a loss that does not fit the network is taken", FF),
    Mutant("dualtape/stack.py", "xp, tape.tapes[k], dstate, dh, need_dxs or k > 0,",
           "xp, tape.tapes[k], dstate, dh, need_dxs,", "upper layers get no input gradient", RNN),
    Mutant(TRAIN, "        grads, dstates = _sequence_gradients(rnet, found, True)",
           "        grads, dstates = _sequence_gradients(rnet, found, False)",
           "learned initial states get no gradient", RNN),
    Mutant(TRAIN, "            own_form_single = np.ndim(state[k]) == 1",
           "            own_form_single = single", "a learned state takes the form of xs", RNN),
    Mutant(TRAIN, "    states, _ = rnet._check_states(state, batch)\n",
           "    states = rnet.initial_state(batch) if state is None else list(state)\n",
           "train_recurrent's state unchecked", RNN),
    Mutant(REC, "        if state is None:\n            state = [None] * count\n", "",
           "a network's state of None refused instead of zeros", RNN),
    Mutant(TRAIN, "    if learn_initial_state and not isinstance(state, list):",
           "    if learn_initial_state and state is None:",
           "a tuple of states accepted for learning in place", RNN),
    # predict_sequence
    Mutant(REC, "                pieces.clear()  # what an earlier chunk's output holds goes "
                "with it\n", "",
           "predict_sequence keeps every chunk's outputs for the last one", PREDICT),
    Mutant(REC, "            stop = min(start + chunk, steps)", "            stop = start + chunk",
           "predict_sequence slices past the end (the array API leaves that open)", PREDICT),
    Mutant(REC, "a.shape != p.shape or a.dtype != p.dtype or (",
           "a.shape != p.shape or (",
           "gradient buffers of another dtype reused", ("tests/test_gradient_buffers.py",)),
    Mutant(REC, "    if len(buffers) != len(targets):\n        return False\n", "",
           "a layer added to the network leaves the buffers one short",
           ("tests/test_gradient_buffers.py",)),
    Mutant(TRAIN, "        local = [float(value), float(finite)]",
           "        local = [float(value), 1.0]", "a NaN input trains on numpy",
           ("tests/test_backpropagate.py", "tests/test_training.py")),
    Mutant(REC, "        for start in range(0, steps, chunk):",
           "        for start in range(0, steps - 1, chunk):",
           "predict_sequence drops the last step at chunk 1", PREDICT),
]
