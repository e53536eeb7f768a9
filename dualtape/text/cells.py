"""The names of train-text's recurrent cells: the layers' class names, ``LSTM`` (Grenade's
peephole LSTM, the default), ``StandardLSTM`` (``torch.nn.LSTM``'s) and ``GRU``; and the
spellings used before them, ``grenade-lstm``, ``lstm`` and ``gru``, which older checkpoints
store and ``--cell`` still takes. Mind the case: ``lstm`` is the former name of
``StandardLSTM``, ``LSTM`` is Grenade's cell.

The standard library alone, so the command line can name the cells without the model code.
"""

from __future__ import annotations

CELL_NAMES = ("LSTM", "StandardLSTM", "GRU")
"""The cells a text model may have, by class name."""
FORMER_NAMES = {"grenade-lstm": "LSTM", "lstm": "StandardLSTM", "gru": "GRU"}
"""The spellings of the cells before the class names, still read and taken."""


def cell_name(spelling: str) -> str:
    """The class name ``spelling`` stands for: a former name's, else ``spelling`` itself (an
    unknown one is left for the caller to refuse)."""
    return FORMER_NAMES.get(spelling, spelling)
