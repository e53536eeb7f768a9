"""Count CUDA kernel launches per LSTM time step on CuPy (generic and fused paths).

Kernels are recorded with torch.profiler (CUPTI sees every kernel of the process, CuPy's too).
Launches per step = (kernels at T=20 − kernels at T=10) / 10, so per-call work cancels out.
Prints one JSON object.
"""

from __future__ import annotations

import json
import os

import cupy
import numpy as np
from torch.profiler import ProfilerActivity, profile

import dualtape


def kernels_in(fn) -> int:
    """The number of CUDA kernels ``fn`` launches."""
    fn()
    cupy.cuda.Device().synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        cupy.cuda.Device().synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


def per_step(mode: str, batch: int = 1) -> dict[str, float]:
    """Kernel launches per time step, forward and backward, with DUALTAPE_FUSED=mode."""
    os.environ["DUALTAPE_FUSED"] = mode
    with dualtape.use_backend("cupy"):
        layer = dualtape.LSTM(40, 512, seed=0, dtype="float32")
        counts = {}
        for steps in (10, 20):
            xs = dualtape.asarray(np.ones((steps, batch, 40)), dtype="float32")
            c0 = layer.initial_state(batch)
            dys = dualtape.asarray(np.ones((steps, batch, 512)), dtype="float32")
            tape = layer.forward_sequence(c0, xs)[0]
            counts[steps] = (
                kernels_in(lambda xs=xs, c0=c0: layer.forward_sequence(c0, xs)),
                kernels_in(lambda tape=tape, dys=dys: layer.backward_sequence(tape, None, dys)),
            )
    return {
        "forward": (counts[20][0] - counts[10][0]) / 10,
        "backward": (counts[20][1] - counts[10][1]) / 10,
    }


if __name__ == "__main__":
    print(json.dumps({"generic": per_step("0"), "fused": per_step("1")}, indent=2))
