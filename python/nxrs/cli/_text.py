"""``nxrs train`` on text (``--data shakespeare`` or ``--data FILE.txt``): a character model
(``--model gpt-char`` by default, built for the text's vocabulary) trained on the text's token
stream by steps, its training and validation losses estimated as it goes, and the run's
summary. Its checkpoints record the vocabulary, which ``nxrs sample`` reads."""

from __future__ import annotations

import time
from typing import Any, TextIO

import nxrs
from nxrs._util.files import json_text
from nxrs._util.signals import StopFlag
from nxrs.cli._common import (
    EXIT_DIVERGED,
    CliError,
    final_checkpoint,
    given,
    model_layers,
    run_options,
    trainer_options,
)
from nxrs.data import Text, _text_source_record, load_text, load_tinyshakespeare

#: ``--data`` naming the built-in text.
SHAKESPEARE = "shakespeare"

#: The steps of a text run when neither ``--steps`` nor a recipe gives them.
DEFAULT_STEPS = 2000


def is_text(data: str) -> bool:
    """Whether ``--data`` names text: the built-in tiny Shakespeare, or a ``.txt`` file."""
    return data == SHAKESPEARE or data.lower().endswith(".txt")


def read_text(data: str) -> Text:
    """The text ``--data`` names, as characters and their ids."""
    return load_tinyshakespeare() if data == SHAKESPEARE else load_text(data)


def text_layers(model: str | None, vocab: int) -> list[Any]:
    """The model for a text of ``vocab`` characters: ``gpt-char`` (the default) built for it,
    or a model file's or another preset's layers as they are."""
    if model is None or model == "gpt-char":
        return nxrs.layers.gpt(vocab)
    return model_layers(model)


def train_text(
    args: Any, out: TextIO, stop: StopFlag | None, settings: dict[str, Any], start: float
) -> int:
    """Runs ``nxrs train`` on text; prints the summary (text, or JSON with ``--json``) and
    returns the exit status. ``settings``: the recipe's trainer settings the command line has
    no option for (betas, weight decay, clipping, ...)."""
    for option, value in (("--layers", args.layers), ("--hidden", args.hidden)):
        if value is not None:
            raise CliError(f"{option} is for tabular data; a text trains a --model (gpt-char)")
    if given(args, "--epochs"):
        raise CliError("a text trains by steps: give --steps, not --epochs")
    text = read_text(args.data)
    layers = text_layers(getattr(args, "model", None), len(text.vocab))
    trainer = nxrs.Trainer(layers=layers, **trainer_options(args), **settings)
    steps = DEFAULT_STEPS if args.steps is None else args.steps
    if not args.json:
        print(
            f"nxrs train: {args.data}: {len(text.train):,} training and {len(text.val):,} "
            f"validation characters, {len(text.vocab)} in the vocabulary; {steps} steps of "
            f"batch {args.batch_size}, {args.optimizer} lr={args.lr}, backend {trainer.backend}",
            file=out,
        )
    history = trainer.fit(
        text.train,
        steps=steps,
        validation_data=text.val,
        eval_every=args.eval_every,
        eval_batches=args.eval_batches,
        _metadata={"vocab": text.vocab},
        # What replay (nxrs verify, nxrs diff) reads the text again by.
        _data_source=_text_source_record(args.data),
        **run_options(args, stop),
    )
    estimates = history.history
    checkpoint = final_checkpoint(history, args.ckpt_dir)
    summary: dict[str, Any] = {
        "data": args.data,
        "layers": trainer.config["layers"],
        "steps": trainer.steps,
        "train_loss": estimates["loss"][-1] if estimates.get("loss") else None,
        "val_loss": estimates["val_loss"][-1] if estimates.get("val_loss") else None,
        "state_hash": f"{trainer.state_hash():016x}",
        "state_digest": trainer.state_digest(),
        "backend": trainer.backend,
        "threads": trainer.threads,
        "checkpoint": checkpoint,
        "seconds": round(time.perf_counter() - start, 3),
    }
    losses = [summary["train_loss"], summary["val_loss"]]
    diverged = any(v is not None and v != v for v in losses)  # a NaN estimate
    if args.json:
        out.write(json_text({**summary, "diverged": diverged}) + "\n")
    else:
        for step, i in zip(history.step, range(len(history.step))):
            row = "  ".join(f"{key} {values[i]:.4f}" for key, values in estimates.items())
            print(f"step {step:6d}  {row}", file=out)
        print(
            f"state hash {summary['state_hash']}  ({trainer.steps} steps, "
            f"{summary['seconds']:.1f} s)",
            file=out,
        )
        if checkpoint is not None:
            print(f"checkpoint {checkpoint}", file=out)
    return EXIT_DIVERGED if diverged else 0
