"""Count CUDA kernel launches per LSTM time step on CuPy (generic and fused paths).

Kernels are recorded with torch.profiler (CUPTI sees every kernel of the process, CuPy's too);
memory copies and sets are not kernels and are not counted. Launches per step =
(kernels at T=20 − kernels at T=10) / 10, so per-call work cancels out. A control first checks
the counter: one in-place CuPy add must count as exactly 1. Prints one JSON object on stdout;
exits 2 without CUDA, 1 when the control fails.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import numpy as np


def needs_cuda() -> str | None:
    """Why this cannot run here, or None."""
    try:
        import cupy
        import torch.profiler  # noqa: F401

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:  # any import or driver failure means: no CUDA here
        return f"{type(exc).__name__}: {exc}"
    return None


def kernels_in(fn: Callable[[], object]) -> int:
    """The number of CUDA kernels (not memcpy/memset) ``fn`` launches."""
    import cupy
    from torch.profiler import ProfilerActivity, profile

    fn()
    cupy.cuda.Device().synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        cupy.cuda.Device().synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA"
               and not e.name.lower().startswith(("memcpy", "memset")))


def per_step(mode: str, batch: int) -> dict[str, float]:
    """Kernel launches per time step, forward and backward, with DUALTAPE_FUSED=mode."""
    import dualtape

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


def main() -> int:
    missing = needs_cuda()
    if missing:
        print(json.dumps({"error": f"needs CUDA: {missing}"}))
        return 2
    import cupy

    x = cupy.zeros(1000, dtype=cupy.float32)
    control = kernels_in(lambda: x.__iadd__(1))
    result = {"control (one in-place add)": control}
    result.update({f"{mode} batch {batch}": per_step(code, batch)
                   for mode, code in (("generic", "0"), ("fused", "1")) for batch in (1, 64)})
    print(json.dumps(result, indent=2))
    return 0 if control == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
