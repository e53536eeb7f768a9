"""dualtape's benchmarks: the pytest-benchmark suite, the reference implementations the
``dualtape bench`` table compares against, and ``compare_devices.py``. Not installed with the
package; importable as ``bench`` from the repository root."""
