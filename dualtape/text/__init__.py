"""Application: the character-level text model behind ``dualtape train-text`` and ``sample``.

``model`` (vocabulary, training windows, the network, sampling), ``config`` (a run's
configuration and its rules), ``trainer`` (the training step and saving checkpoints),
``checkpoint`` (reading them back), ``loop`` (the training loop), ``cli`` (the two commands),
``distributed`` (``train-text --distributed`` over MPI). It uses the core library; nothing in
the core imports it.
"""
