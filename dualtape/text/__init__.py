"""Application: the character-level text model behind ``dualtape train-text`` and ``sample``.

``model`` (vocabulary, training windows, the network, sampling), ``trainer`` (the training loop
and checkpoints), ``cli`` (the two commands), ``distributed`` (``train-text --distributed``
over MPI). It uses the core library; nothing in the core imports it.
"""
