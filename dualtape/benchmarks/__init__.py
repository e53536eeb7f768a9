"""Application: the cross-device benchmark behind ``dualtape bench``.

``measure`` (workloads, runners, timing), ``bound`` (the structural bound: the matrix products
alone), ``references`` with ``naive_lstm`` and ``torch_lstm`` (the reference implementations the
rows are compared against), ``report`` (tables, JSON, Markdown, plot). It uses the core
library; nothing in the core imports it, and it never imports the top-level ``bench/`` folder.
"""
