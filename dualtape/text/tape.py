"""What ``dualtape tape`` reports for a train-text checkpoint: the training call train-text makes
(``trainer.py``), not one of the saved network as it stands. That network ends in Softmax, for
sampling; a step runs the layers before it, fed the windows' symbol ids in place of their one-hot
rows, and scores their logits with ``softmax_cross_entropy`` at the next symbols' ids. Its
windows (``seq_len`` x ``batch``) and optimizer are the checkpoint's, and its Dropout layers
are on (as a loaded network's are), as in training."""

from __future__ import annotations

from ..io import load_with_extra
from ..recurrent import RecurrentNetwork
from ..tape_command import TrainingCall


def training_call(path: str) -> TrainingCall:
    """The ``TrainingCall`` of the file at ``path``: a train-text checkpoint's (see the
    module), checked as ``load_checkpoint`` checks it; any other dualtape file's network as
    saved. ``OSError`` or ``ValueError`` in one line. The text modules are imported here, not
    with ``dualtape.cli``, which must stay quick to import."""
    from .checkpoint import load_checkpoint
    from .config import make_optimizer
    from .model import TextError

    net, extra = load_with_extra(path, backend="numpy")
    if "text_format" not in extra:
        return TrainingCall(net)
    try:
        checkpoint = load_checkpoint(path)
        optimizer = make_optimizer(checkpoint.config)
    except TextError as exc:
        raise ValueError(str(exc)) from None
    config = checkpoint.config
    logits = RecurrentNetwork(checkpoint.net.layers[:-1])
    return TrainingCall(
        logits, ids=True, loss="softmax_cross_entropy", seq_len=config.seq_len,
        batch=config.batch, optimizer=optimizer,
        note=f"{path} is a train-text checkpoint: this is the call train-text makes, the layers "
        "before its Softmax fed the windows' symbol ids, their logits scored by "
        f"softmax_cross_entropy (trained on windows of {config.seq_len} x batch "
        f"{config.batch} with {type(optimizer).__name__})")
