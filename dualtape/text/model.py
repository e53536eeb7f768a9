"""Character-level text models: the vocabulary, training windows, the network and sampling.

The pieces behind ``dualtape train-text`` and ``dualtape sample`` (training and saving
checkpoints are in ``trainer``, reading them in ``checkpoint``, the loop in ``loop``, the
command line in ``cli``):

- ``Vocabulary``: the N most frequent characters of a text plus one unknown symbol, optionally
  with Grenade's capital annotation (an uppercase letter becomes a marker and its lowercase
  letter, so the network learns one symbol per letter and a separate "capital" decision);
- ``random_windows``: batches of ``seq_len + 1`` consecutive symbol ids, the input being the
  first ``seq_len`` and the target (class labels) the last ``seq_len`` (the next character);
- ``build_text_network``: stacked recurrent layers of one cell (``CELLS``: Grenade's LSTM,
  torch's LSTM or GRU), optionally with ``Dropout`` between them, + FullyConnected + Softmax;
  ``check_text_network`` tells a checkpoint's network apart from other networks;
- ``sample``: one character at a time through ``RecurrentNetwork.step``, on the host.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from importlib import resources
from typing import Any, NamedTuple

import numpy as np

from ..backend import from_host, to_numpy
from ..files import open_regular
from ..layers import GRU, LSTM, Dropout, FullyConnected, Softmax, StandardLSTM
from ..recurrent import RecurrentNetwork
from .cells import CELL_NAMES, cell_name

UNKNOWN = "\ue000"
"""The unknown symbol in a symbol stream (a private-use character); decoded as U+FFFD."""
CAPITAL = "\ue001"
"""The capital marker in an annotated symbol stream (a private-use character)."""
SHOWN = {UNKNOWN: "\ufffd", CAPITAL: "^"}
BUILTIN_CORPUS = "corpus.txt"


class TextError(Exception):
    """A problem with the user's input (file, checkpoint, option), reported in one line."""


def _has_lower(c: str) -> bool:
    """Whether ``c`` is an uppercase letter whose lowercase form maps back to it exactly."""
    if not c.isupper():
        return False
    low = c.lower()
    return len(low) == 1 and low.upper() == c


def annotate_capitals(text: str) -> str:
    """Grenade's trick: every uppercase letter becomes ``CAPITAL`` + its lowercase letter."""
    return "".join(CAPITAL + c.lower() if _has_lower(c) else c for c in text)


def restore_capitals(stream: str) -> str:
    """Undo ``annotate_capitals``: a marker uppercases the next character; stray markers go."""
    out, pending = [], False
    for c in stream:
        if c == CAPITAL:
            pending = True
            continue
        if pending:
            upper = c.upper()
            c = upper if len(upper) == 1 and upper.lower() == c else c
        out.append(c)
        pending = False
    return "".join(out)


class Vocabulary:
    """Symbols of a character model: ``UNKNOWN`` first, then ``CAPITAL`` when annotating
    capitals, then the kept characters in code-point order. Characters outside it (and the two
    private-use code points if a text contains them) encode as the unknown symbol."""

    def __init__(self, symbols: Sequence[str], annotate_capitals: bool = False) -> None:
        symbols = list(symbols)
        specials = [UNKNOWN, CAPITAL] if annotate_capitals else [UNKNOWN]
        if symbols[: len(specials)] != specials or len(set(symbols)) != len(symbols) or any(
            not isinstance(s, str) or len(s) != 1 for s in symbols
        ):
            raise ValueError("Vocabulary: symbols must be distinct characters after "
                             f"the special symbols {specials!r}")
        self.symbols = symbols
        self.annotate_capitals = annotate_capitals
        self.index = {s: k for k, s in enumerate(symbols)}

    @classmethod
    def build(cls, text: str, size: int = 100, annotate_capitals: bool = False) -> Vocabulary:
        """The ``size`` most frequent characters of ``text`` (ties by code point), after
        capital annotation if asked, plus the special symbols."""
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"Vocabulary: size must be a positive integer, got {size!r}")
        counts = Counter(cls._stream(text, annotate_capitals))
        for special in (UNKNOWN, CAPITAL):
            counts.pop(special, None)
        kept = sorted(counts, key=lambda c: (-counts[c], c))[:size]
        specials = [UNKNOWN, CAPITAL] if annotate_capitals else [UNKNOWN]
        return cls(specials + sorted(kept), annotate_capitals)

    @staticmethod
    def _stream(text: str, annotate: bool) -> str:
        text = text.replace(CAPITAL, UNKNOWN)
        return annotate_capitals(text) if annotate else text

    def __len__(self) -> int:
        return len(self.symbols)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and (self.symbols, self.annotate_capitals) == (
            other.symbols, other.annotate_capitals)

    def __repr__(self) -> str:
        shown = "".join(SHOWN.get(s, s) for s in self.symbols)
        return f"Vocabulary({len(self)} symbols: {shown!r})"

    @property
    def characters(self) -> int:
        """How many characters of text it keeps (its size without the special symbols)."""
        return len(self) - (2 if self.annotate_capitals else 1)

    def encode(self, text: str) -> np.ndarray:
        """Symbol ids (int64) of ``text``; unknown characters become id 0."""
        index = self.index
        return np.fromiter(
            (index.get(c, 0) for c in self._stream(text, self.annotate_capitals)), dtype=np.int64
        )

    def decode(self, ids: Iterable[int]) -> str:
        """The text of symbol ids: capitals restored, unknown symbols shown as U+FFFD."""
        stream = "".join(self.symbols[int(k)] for k in ids)
        if self.annotate_capitals:
            stream = restore_capitals(stream)
        return stream.replace(UNKNOWN, SHOWN[UNKNOWN])

    def to_json(self) -> dict[str, Any]:
        """A JSON-able description (for checkpoints)."""
        return {"symbols": "".join(self.symbols), "annotate_capitals": self.annotate_capitals}

    @classmethod
    def from_json(cls, data: Any) -> Vocabulary:
        """The vocabulary ``to_json`` described; ``ValueError`` when ``data`` is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("symbols"), str) or (
                not isinstance(data.get("annotate_capitals", False), bool)):
            raise ValueError("not a vocabulary description")
        return cls(list(data["symbols"]), data.get("annotate_capitals", False))


def random_windows(
    ids: np.ndarray, seq_len: int, batch: int, rng: np.random.Generator
) -> np.ndarray:
    """``(seq_len + 1, batch)`` ids: ``batch`` windows of consecutive symbols starting at
    uniformly random offsets. Input is ``window[:-1]``, target (next symbol) ``window[1:]``."""
    if len(ids) < seq_len + 1:
        raise ValueError(f"random_windows: {len(ids)} symbols, need at least {seq_len + 1}")
    return windows_at(ids, rng.integers(0, len(ids) - seq_len, size=batch), seq_len)


def windows_at(ids: np.ndarray, starts: np.ndarray, seq_len: int) -> np.ndarray:
    """``(seq_len + 1, len(starts))`` ids: the windows of ``ids`` beginning at ``starts``."""
    return ids[starts[None, :] + np.arange(seq_len + 1)[:, None]]


def parse_hidden(spec: str) -> list[int]:
    """``"80,80"`` -> ``[80, 80]``; anything but positive integers raises ``TextError``."""
    try:
        sizes = [int(part) for part in spec.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(n < 1 for n in sizes):
        raise TextError(
            f"--hidden must be comma-separated positive layer sizes such as 80,80; got {spec!r}"
        )
    return sizes


CELLS: dict[str, type[LSTM] | type[StandardLSTM] | type[GRU]] = {
    "LSTM": LSTM, "StandardLSTM": StandardLSTM, "GRU": GRU}
"""The recurrent cells of a text model (``--cell``), by class name (``cells.py``): Grenade's
peephole LSTM (the default), ``torch.nn.LSTM``'s and ``torch.nn.GRU``'s. Grenade's
``BasicRecurrent`` is left out: it is linear (no nonlinearity on its state), too weak for
text."""


class TextLayout(NamedTuple):
    """What a text network is, as ``check_text_network`` reads it: the recurrent layers'
    ``hidden`` sizes, their ``cell`` (a ``CELLS`` name) and the ``dropout`` rate between them
    (0: no Dropout layers)."""

    hidden: list[int]
    cell: str
    dropout: float


def layer_seeds(seed: int | None, layers: int) -> tuple[list[int], int, list[int]]:
    """The seeds ``build_text_network`` gives ``layers`` recurrent layers, the FullyConnected
    layer and the ``layers - 1`` Dropout layers, all drawn from ``seed`` (the Dropout seeds
    after the others, so the weights do not depend on the dropout)."""
    rng = np.random.default_rng(seed)
    seeds = [int(s) for s in rng.integers(0, 2**63 - 1, size=layers + 1)]
    dropout = [int(s) for s in rng.integers(0, 2**63 - 1, size=max(layers - 1, 0))]
    return seeds[:-1], seeds[-1], dropout


def build_text_network(
    vocab_size: int, hidden: Sequence[int], *, seed: int | None = None, dtype: str = "float32",
    cell: str = "LSTM", dropout: float = 0.0,
) -> RecurrentNetwork:
    """``R(vocab, h1), [Dropout(p),] R(h1, h2), …, FullyConnected(h_last, vocab), Softmax()``
    on the current backend, ``R`` the recurrent layer ``CELLS[cell]``; with ``dropout`` > 0 a
    ``Dropout(dropout)`` follows every recurrent layer but the last (as ``torch.nn.LSTM``'s
    ``dropout``; it needs two layers or more). Every layer is seeded from ``seed``.

    ``cell`` is a class name or a former one (``cells.py``). ``"StandardLSTM"`` and ``"GRU"``
    keep torch's initialisation (uniform in ±1/√n_out). Grenade's ``"LSTM"`` has its weights
    rescaled for training: Grenade draws them uniform in
    [-1, 1]. A gate then sums ``n`` terms of standard
    deviation ~0.58·|x|, so with 80 cells the recurrent and stacked inputs push the gates deep
    into saturation. So the LSTMs after the first take ``init="scaled"`` (``W`` divided by
    √n_in, ``U`` by √n_out) and the first ``init="scaled_recurrent"`` (only ``U``: it sees
    one-hot input, where a single column is active and Grenade's scale is right); the biases,
    forget bias 1 included, stay as Grenade has them (see ``help(dualtape.LSTM)``).
    Measured on the built-in corpus (80,80, batch 32, seeds 1 and 2, 400 steps, nats/char):
    Grenade's scale ends at 2.96-2.98 with SGD 0.5 (after a first-100-step mean of 18-24) and
    2.24-2.29 with Adam 0.01; rescaled, 1.56-1.58 and 1.21-1.23.
    """
    cell = cell_name(cell)
    if cell not in CELL_NAMES:
        raise ValueError(f"build_text_network: cell must be one of {', '.join(CELL_NAMES)}, "
                         f"got {cell!r}")
    if dropout and len(hidden) < 2:
        raise ValueError("build_text_network: dropout goes between recurrent layers; "
                         f"{len(hidden)} layer has none")
    recurrent_seeds, fc_seed, dropout_seeds = layer_seeds(seed, len(hidden))
    layers: list[Any] = []
    n_in = vocab_size
    for k, n_out in enumerate(hidden):
        if k and dropout:
            layers.append(Dropout(dropout, seed=dropout_seeds[k - 1]))
        if cell == "LSTM":
            init = "scaled" if k else "scaled_recurrent"
            layers.append(LSTM(n_in, n_out, seed=recurrent_seeds[k], dtype=dtype, init=init))
        else:
            layers.append(CELLS[cell](n_in, n_out, seed=recurrent_seeds[k], dtype=dtype))
        n_in = n_out
    layers += [FullyConnected(n_in, vocab_size, seed=fc_seed, dtype=dtype), Softmax()]
    return RecurrentNetwork(layers)


def check_text_network(net: Any, vocab_size: int) -> TextLayout:
    """The layout (hidden sizes, cell, dropout) of a network ``build_text_network`` could have
    made for ``vocab_size`` symbols; ``TextError`` describing the mismatch otherwise."""
    layers = getattr(net, "layers", [])
    kinds = [layer.kind for layer in layers]
    body = layers[:-2]
    dropped = len(body) > 1 and kinds[1] == "Dropout"
    recurrent, between = (body[::2], body[1::2]) if dropped else (body, [])
    rates = {getattr(layer, "rate", None) for layer in between}
    shape_ok = (
        isinstance(net, RecurrentNetwork) and len(kinds) >= 3
        and kinds[-2:] == ["FullyConnected", "Softmax"] and (len(body) % 2 == 1 or not dropped)
        and len({layer.kind for layer in recurrent}) == 1 and kinds[0] in CELLS
        and all(layer.kind == "Dropout" for layer in between) and len(rates) <= 1
        and 0 not in rates
    )
    if not shape_ok:
        raise TextError(
            f"the network {net!r} is not a text model (recurrent layers of one cell: "
            f"{', '.join(CELLS)}, with the same Dropout between each two or none; then "
            "FullyConnected, Softmax)")
    if layers[0].n_in != vocab_size or layers[-2].n_out != vocab_size:
        raise TextError(
            f"the network takes {layers[0].n_in} and gives {layers[-2].n_out} symbols but the "
            f"vocabulary has {vocab_size}; the checkpoint is from another network"
        )
    dropout = rates.pop() if rates else 0.0
    assert dropout is not None  # the layers between are Dropout layers, each with its rate
    return TextLayout([layer.n_out for layer in recurrent], kinds[0], dropout)


def dropout_layers(net: Any) -> list[Any]:
    """The ``Dropout`` layers of a network, in order."""
    return [layer for layer in net.layers if layer.kind == "Dropout"]


@contextlib.contextmanager
def evaluating(net: Any) -> Iterator[None]:
    """Within: ``net`` with its Dropout layers off (``set_training(False)``); after: each
    layer as it was."""
    switched = [(layer, layer.training) for layer in net.layers if hasattr(layer, "training")]
    net.set_training(False)
    try:
        yield
    finally:
        for layer, training in switched:
            layer.training = training


MAX_CORPUS_MB = 64
"""The default cap on a corpus file's size, in MB (``--max-corpus-mb``): its symbol ids take
8 bytes per character in memory."""


def read_corpus(
    path: str | os.PathLike | None, encoding: str = "utf-8", max_mb: float = MAX_CORPUS_MB
) -> str:
    """The text of ``path`` (at most ``max_mb`` megabytes, read no further), or of the built-in
    corpus when ``path`` is None; every problem (missing, unreadable, too large, not text in
    ``encoding``, empty) raises ``TextError``."""
    if path is None:
        corpus = resources.files("dualtape").joinpath("data").joinpath(BUILTIN_CORPUS)
        return corpus.read_text("utf-8")  # one name per joinpath: Traversable's on Python 3.10
    limit = int(min(max_mb * 1e6, sys.maxsize - 1))
    try:
        f, _ = open_regular(path)  # a FIFO or device would block or never end
        with f:
            raw = _read_at_most(f, limit + 1)
    except OSError as exc:
        raise TextError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise TextError(f"cannot read {exc}") from None
    if len(raw) > limit:
        raise TextError(f"{path} is larger than {max_mb:g} MB; give a smaller text or raise "
                        "--max-corpus-mb")
    try:
        text = raw.decode(encoding)
    except LookupError:
        raise TextError(f"unknown text encoding {encoding!r} (try utf-8 or latin-1)") from None
    except UnicodeDecodeError as exc:
        raise TextError(
            f"{path} is not valid {encoding} text (byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start}); if it is text in another encoding, pass it with --encoding, "
            "e.g. --encoding latin-1"
        ) from None
    if not text:
        raise TextError(f"{path} is empty; give a text to learn")
    return text


def _read_at_most(f: Any, size: int) -> bytes:
    """Up to ``size`` bytes of ``f``, read a megabyte at a time (never allocating ``size``)."""
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = f.read(min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def fingerprint(text: str) -> str:
    """The SHA-256 of ``text`` in UTF-8 (checkpoints record their corpus's)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def choose(probs: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """A symbol drawn from ``probs ** (1 / temperature)``, renormalised, in float64."""
    p = np.asarray(probs, dtype=np.float64)
    if temperature != 1.0:  # shifted before the division, so no temperature makes it NaN
        logp = np.log(np.maximum(p, np.finfo(np.float64).tiny))
        with np.errstate(over="ignore"):  # -inf for all but the likeliest at tiny temperatures
            p = np.exp((logp - logp.max()) / temperature)
    p = np.where(np.isfinite(p) & (p > 0), p, 0.0)
    total = p.sum()
    if not total > 0:
        raise FloatingPointError("sample: the network gives no usable probabilities (NaN?)")
    return int(rng.choice(len(p), p=p / total))


def sample(
    net: RecurrentNetwork,
    vocab: Vocabulary,
    chars: int,
    *,
    temperature: float = 1.0,
    rng: np.random.Generator | None = None,
    prime: str = "",
) -> str:
    """``chars`` symbols generated after ``prime`` (the prime is not repeated in the result).

    Without a prime the network starts from a newline (or the most common symbol when the
    vocabulary has none), as from the start of a paragraph. Deterministic for a seeded ``rng``
    on one backend.
    """
    return "".join(generate(net, vocab, chars, temperature=temperature, rng=rng, prime=prime))


def generate(
    net: RecurrentNetwork,
    vocab: Vocabulary,
    chars: int,
    *,
    temperature: float = 1.0,
    rng: np.random.Generator | None = None,
    prime: str = "",
) -> Iterator[str]:
    """``sample``'s text piece by piece, as each symbol is drawn (a capital marker is held
    back until its letter comes), so a caller can print it as it comes. Dropout is off while
    it computes (``evaluating``), whatever the network's training switch says between."""
    if not temperature > 0:
        raise ValueError(f"sample: temperature must be positive, got {temperature}")
    rng = rng if rng is not None else np.random.default_rng()
    backend, eye = net.backend, np.eye(len(vocab), dtype=net.dtype)
    start = vocab.index.get("\n", vocab.index.get(" ", 0))
    primed = vocab.encode(prime) if prime else np.asarray([start])
    with evaluating(net):
        state, last = net.predict_sequence(net.initial_state(), from_host(eye[primed], backend),
                                           outputs="last")
    probs = to_numpy(last)
    marker = vocab.index.get(CAPITAL) if vocab.annotate_capitals else None
    held: list[int] = []
    for n in range(chars):
        symbol = choose(probs, temperature, rng)
        held.append(symbol)
        if symbol != marker:
            yield vocab.decode(held)
            held.clear()
        if n + 1 < chars:
            with evaluating(net):
                state, y = net.predict_step(state, from_host(eye[symbol], backend))
            probs = to_numpy(y)
