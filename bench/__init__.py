"""dualtape's benchmark scripts: the pytest-benchmark suite, GPU scripts, ``compare_devices.py``
and the measured tables in ``results/``. Not installed with the package; importable as ``bench``
from the repository root. The reference implementations live in ``dualtape.benchmarks``."""
