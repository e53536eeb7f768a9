"""Mutants of train-text's stateful streams and held-out split (``text/streams.py``,
``text/trainer.py``)."""

from run_mutants import Mutant

STREAMS = "dualtape/text/streams.py"
TRAINER = "dualtape/text/trainer.py"
SPLIT = "dualtape/text/split.py"
TESTS = ("tests/test_text_streams.py",)
MUTANTS = [
    Mutant(STREAMS, "    offset = epoch % seq_len\n", "    offset = 0\n",
           "the window boundaries never move between epochs", TESTS),
    Mutant(STREAMS, "    return StreamLayout(offset, span, (span - 1) // seq_len)",
           "    return StreamLayout(offset, span, span // seq_len)",
           "a stream's last window reads into the next stream", TESTS),
    Mutant(STREAMS, "    need = count * (seq_len + 1) + seq_len - 1",
           "    need = count * (seq_len + 1)", "a text too short for the worst offset passes",
           TESTS),
    Mutant(STREAMS, "    if position.window + 1 < layout(", "    if position.window < layout(",
           "one window past the stream's end", TESTS),
    Mutant(STREAMS, "    return where.offset + streams * where.span + position.window * seq_len",
           "    return where.offset + streams * where.span + position.window * (seq_len + 1)",
           "windows skip a symbol between them", TESTS),
    Mutant(TRAINER, "            self.carried = None if self.position.window == 0 else [",
           "            self.carried = None if True else [",
           "the state is never carried to the next window", TESTS),
    Mutant(TRAINER, "            self.carried = None if self.position.window == 0 else [",
           "            self.carried = None if False else [",
           "the state is carried into the next epoch", TESTS),
    Mutant(TRAINER, "                self.xp.asarray(s, copy=True) for s in ends]",
           "                s for s in ends]", "the carried states are views of the tape",
           TESTS),
    Mutant(TRAINER, "        fits = (where[\"count\"] == self.stream_count and ",
           "        fits = (True and ", "streams of another batch continued", TESTS),
    Mutant(TRAINER, "        if self.carried is not None and self.stream_count == "
                    "self.config.batch:",
           "        if self.carried is not None:", "a rank's own states stored as everyone's",
           TESTS),
    Mutant(TRAINER, "                s.shape != tuple(z.shape) or s.dtype != cfg.dtype or not "
                    "np.isfinite(s).all()",
           "                s.shape != tuple(z.shape) or s.dtype != cfg.dtype",
           "NaN carried states accepted", TESTS),
    Mutant(TRAINER, "                states, ys = core.predict_sequence(states, ids[:-1, ...])",
           "                _, ys = core.predict_sequence(states, ids[:-1, ...])",
           "the held-out streams restart at every chunk", TESTS),
    Mutant(TRAINER, "        nats = float(to_numpy(total)) / span\n",
           "        nats = float(to_numpy(total)) / (span + 1)\n",
           "the held-out loss divided by one symbol too many", TESTS),
    Mutant(TRAINER, "        if nats < self.held_out.get(\"best\", [0, math.inf])[1]:",
           "        if nats > self.held_out.get(\"best\", [0, math.inf])[1]:",
           "the worst held-out loss kept as the best", TESTS),
    Mutant(SPLIT, "    training = ids[:len(ids) - held]", "    training = ids",
           "the held-out symbols trained on too", TESTS),
    Mutant(SPLIT, "    if held < 2:", "    if held < 1:",
           "a held-out part of one symbol (no loss) accepted", TESTS),
    Mutant("dualtape/text/record.py", "    return nats / math.log(2)",
           "    return nats / math.log(10)",
           "bits in the wrong base", TESTS),
]
MUTANTS.append(Mutant("dualtape/text/cli.py", '_closing(log, trainer.held_out.get("best"), len(',
                      '_closing(log, trainer.held_out.get("last"), len(',
                      "the closing line reports the last held-out loss as the best", TESTS))
