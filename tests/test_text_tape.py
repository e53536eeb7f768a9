"""``text/tape.py`` in this process: the training call ``dualtape tape`` reports for a small
train-text checkpoint, field by field, for a damaged one, and for a plain dualtape file
(``test_tape_report.py`` measures the call against a real step)."""

from __future__ import annotations

import pytest

import dualtape as dt
from dualtape.tape_command import TrainingCall
from dualtape.text.tape import training_call
from tests.test_tape_report import text_checkpoint


def test_a_checkpoint_is_the_call_train_text_makes(tmp_path):
    path = tmp_path / "model.npz"
    trainer = text_checkpoint(path, hidden=[8, 6], seq_len=12, batch=3, optimizer="adam",
                              rate=0.01)
    call = training_call(str(path))
    assert (call.ids, call.loss, call.seq_len, call.batch) == (True, "softmax_cross_entropy",
                                                               12, 3)
    assert type(call.optimizer) is dt.Adam
    assert type(call.net) is dt.RecurrentNetwork
    assert [repr(layer) for layer in call.net.layers] == [repr(layer) for layer in
                                                         trainer.net.layers[:-1]]
    assert call.note == (
        f"{path} is a train-text checkpoint: this is the call train-text makes, the layers "
        "before its Softmax fed the windows' symbol ids, their logits scored by "
        "softmax_cross_entropy (trained on windows of 12 x batch 3 with Adam)")


def test_a_damaged_checkpoint_is_a_value_error_naming_it(tmp_path):
    trainer = text_checkpoint(tmp_path / "model.npz", hidden=[8], seq_len=4, batch=2)
    damaged = tmp_path / "damaged.npz"
    dt.save(trainer.net, damaged, extra={"text_format": 1})
    with pytest.raises(ValueError, match=f"^{damaged}: ") as caught:
        training_call(str(damaged))
    assert caught.value.__suppress_context__ and "\n" not in str(caught.value)


def test_any_other_file_is_its_network_as_saved_on_numpy(tmp_path):
    pytest.importorskip("array_api_strict")
    path = tmp_path / "net.npz"
    net = dt.RecurrentNetwork([dt.LSTM(3, 4, seed=1), dt.Softmax()])
    dt.save(net, path)
    with dt.use_backend("array_api_strict"):  # not where the report measures
        call = training_call(str(path))
    assert call == TrainingCall(call.net) and call.net.backend.name == "numpy"
    assert [repr(layer) for layer in call.net.layers] == [repr(layer) for layer in net.layers]
