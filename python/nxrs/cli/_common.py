"""What the ``nxrs`` commands share: exit statuses, one-line errors, the option types (each
malformed or out-of-range value is an argparse usage error naming its option, checked once by
its type), the data options, ``--model`` and the model the data implies."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

import numpy as np
import numpy.typing as npt

import nxrs
from nxrs import layers
from nxrs._nxrs import ConfigError
from nxrs._util import config as _config
from nxrs._util.checks import save_points
from nxrs._util.signals import StopFlag
from nxrs.data import TASKS, TEST_SIZE

#: ``nxrs train``'s exit statuses (also in its --help and docs/RUNS.md).
EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_OTHER_RUN = 3
EXIT_LOCKED = 4
EXIT_SAVE_FAILED = 5
#: The run diverged: its final loss is not a finite number (the summary is still printed, with
#: null for the non-finite values and "diverged": true); ``nxrs sweep``'s too.
EXIT_DIVERGED = 6
EXIT_SIGINT = 128 + signal.SIGINT  # 130
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143


class CliError(Exception):
    """A failure reported as one line on stderr with exit status 1."""


def error_line(err: BaseException) -> str:
    """``err`` as the command line reports it: its type and message (a ``CliError``'s message
    alone), on one line: a message of several lines (a storage client's ``Forbidden: PATH``
    then the store's answer) has its lines joined."""
    name = "" if isinstance(err, CliError) else f"{type(err).__name__}: "
    return name + re.sub(r"\s*\n\s*", " ", str(err).strip())


class Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line: ``nxrs train: error: ... (see ...--help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def add_command(
    commands: Any, name: str, help: str, description: str, epilog: str
) -> argparse.ArgumentParser:
    """A subcommand whose --help shows its description (wrapped) and examples (as written)."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=help,
        description=textwrap.fill(description, width=79),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(parser=parser)  # its own usage errors name it: "nxrs train: error: ..."
    return parser


# --- option values

_WHOLE = re.compile(r"\s*\+?[0-9]+\s*")


def _whole_number(text: str, minimum: int) -> int:
    if not _WHOLE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    value = int(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
    return value


def positive_int(text: str) -> int:
    """A count of at least 1 (``--epochs``, ``--batch-size``, ``--every``, ``--threads``)."""
    return _whole_number(text, 1)


def nonnegative_int(text: str) -> int:
    """A count of at least 0 (``--max-retries``)."""
    return _whole_number(text, 0)


def _sizes(text: str, least: int, example: str) -> list[int]:
    parts = text.split(",")
    if len(parts) < least or not all(_WHOLE.fullmatch(p) and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r}: {least} or more comma-separated whole numbers of at least 1 expected, "
            f"e.g. {example}"
        )
    return [int(p) for p in parts]


def layer_sizes(text: str) -> list[int]:
    """``--layers``: every layer size, inputs first (at least two).

    >>> layer_sizes("64,128,10")
    [64, 128, 10]
    >>> layer_sizes("4,,3")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: '4,,3': 2 or more comma-separated whole numbers ... 64,128,10
    """
    return _sizes(text, 2, "64,128,10")


def keep_option(text: str) -> int | Literal["all"]:
    """``--keep``: a count of at least 1, or ``all``."""
    return "all" if text == "all" else _whole_number(text, 1)


def hidden_sizes(text: str) -> list[int]:
    """``--hidden``: the hidden layer sizes (at least one)."""
    return _sizes(text, 1, "128 or 256,64")


def nonempty_text(text: str) -> str:
    """A local path option's text (``--data``, ``--model``), refused when empty (an empty path
    would silently mean the current directory) or a URL (``nxrs._storage.store.has_scheme``: as a
    path, ``s3://bucket/x`` would be the relative ``s3:/bucket/x``)."""
    from nxrs._storage.store import has_scheme

    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    if has_scheme(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a local path is expected, not a URL (./{text} for a relative path "
            "whose first name has a colon)"
        )
    return text


def nonempty_path(text: str) -> Path:
    """A local file or directory option (``--plot``, ``nxrs inspect FILE``, ...), as
    ``nonempty_text`` takes it."""
    return Path(nonempty_text(text))


def nonempty_location(text: str) -> Path | str:
    """A run directory option (``--ckpt-dir``, ``nxrs status DIR``, ...): a local path, or a
    URL on object storage (``s3://bucket/run``, ``gs://...``) kept as text; refused when empty,
    and when it starts with a scheme but is no URL nxrs takes (``nxrs._storage.store.url_protocol``:
    ``s3:/bucket/run``, ``file:///abs/run``), which would otherwise be a local directory."""
    from nxrs._storage.store import is_url

    try:
        url = bool(text) and is_url(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text if url else nonempty_path(text)


def output_file(text: str) -> Path:
    """A file a command writes at its end (``--plot``), checked before anything runs: a local
    path (``nonempty_path``) that is not a directory, in a directory that exists. A missing
    directory is refused rather than made: a mistyped path should not cost the run."""
    path = nonempty_path(text)
    if text.endswith(("/", os.sep)) or path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} names a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist (nxrs makes none)"
        raise argparse.ArgumentTypeError(f"{text!r}: {str(parent)!r} {why}")
    return path


def _test_fraction(text: str) -> float:
    """``--test-size``'s value: a fraction strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def add_epochs_argument(parser: argparse.ArgumentParser) -> None:
    """``--epochs``: the epochs a run trains in all (``nxrs train``, ``nxrs sweep``)."""
    parser.add_argument(
        "--epochs", type=positive_int, default=20, help="epochs in all, at least 1 (default 20)"
    )


def add_setting_argument(
    parser: argparse.ArgumentParser, name: str, help: str, type: Any = None
) -> None:
    """``--<name>`` for the configuration setting ``name``, its default (the general family's)
    and, for a setting that takes a name, its choices (alphabetically) from the configuration
    schema, so the command line restates neither; ``{default}`` in ``help`` shows the default."""
    default = _config.default(name)
    row = _config.setting(name)
    choices = sorted(row["choices"]) if row["choices"] is not None else None
    parser.add_argument(
        "--" + name.replace("_", "-"),
        type=type,
        choices=choices,
        default=default,
        help=help.format(default=default),
    )


def add_save_point_arguments(
    parser: argparse.ArgumentParser, *, every: str, seconds: str, default_seconds: float | None
) -> None:
    """``--every`` and ``--every-seconds`` (``fit``'s ``every`` and ``every_seconds``), with
    the command's help texts; ``check_save_points`` checks them."""
    parser.add_argument("--every", type=positive_int, default=None, help=every)
    parser.add_argument(
        "--every-seconds", type=float, default=default_seconds, metavar="N", help=seconds
    )


def check_save_points(
    parser: argparse.ArgumentParser, args: argparse.Namespace, *, checkpointed: bool
) -> None:
    """``--every`` and ``--every-seconds`` by ``fit``'s rule (``nxrs._util.checks.save_points``),
    each refused as a usage error naming it: without a run directory (not ``checkpointed``:
    no ``--ckpt-dir``), or out of range."""
    given: tuple[tuple[str, int | None, float | None], ...] = (
        ("--every", args.every, None),
        ("--every-seconds", None, args.every_seconds),
    )
    for option, every, every_seconds in given:
        try:
            save_points(every, every_seconds, checkpointed=checkpointed)
        except ConfigError:
            parser.error(
                f"{option} must be positive" if checkpointed else f"{option} needs --ckpt-dir"
            )


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """``--data``, ``--target``, ``--task`` and ``--test-size``, as ``nxrs train`` and
    ``nxrs sweep`` read them (with ``nxrs.data.load`` and ``nxrs.data.split``)."""
    parser.add_argument(
        "--data",
        default="digits",
        type=nonempty_text,
        help="'digits' (scikit-learn's bundled 1,797 8x8 digits, the default), 'mnist1d' "
        "(MNIST-1D: 4,000 training and 1,000 test signals of length 40, the paper's split; "
        "generated locally, needs pip install 'nxrs[mnist1d]'), a .npz file with arrays X and "
        "y, a .csv file with a header row, or text for a character model: 'shakespeare' "
        "(tiny Shakespeare, downloaded once and checked) or a UTF-8 .txt file",
    )
    parser.add_argument(
        "--target",
        default=None,
        help="the label column of a .csv file (default: the last; refused for other data)",
    )
    parser.add_argument(
        "--task",
        choices=TASKS,
        default="auto",
        help="what the labels are: classify (class indices, whole numbers from 0), regress "
        "(float targets), or auto (the default): classes when every label is a whole number, "
        "float targets when at most half are, an error for a mixed column in between",
    )
    parser.add_argument(
        "--test-size",
        type=_test_fraction,
        default=None,
        help=f"fraction of the samples in the deterministic test split (default {TEST_SIZE}); "
        "refused for mnist1d, which has its own split",
    )


# --- the model the data implies


def loss_for(y: npt.NDArray[Any]) -> Literal["cross_entropy", "mse"]:
    """The loss of labels ``y`` as ``nxrs.data.load`` returns them: int64 class indices are
    classification (cross-entropy), float targets regression (mse)."""
    return "cross_entropy" if np.issubdtype(y.dtype, np.integer) else "mse"


def default_layers(
    x: npt.NDArray[Any], y: npt.NDArray[Any], hidden: Sequence[int] | None
) -> list[int]:
    """``[inputs, *hidden, outputs]`` from the data (``hidden`` defaults to ``[128]``): as many
    outputs as classes for integer labels, as target columns for float targets (mse). The data
    is ``nxrs.data.load``'s: ``x`` 2-D, ``y`` int64 class indices or float targets."""
    if loss_for(y) == "cross_entropy":
        n_out = int(y.max()) + 1
    else:
        n_out = 1 if y.ndim == 1 else int(y.shape[1])
    return [int(x.shape[1]), *(hidden if hidden is not None else [128]), n_out]


# --- --model: a model of layer objects


def add_model_argument(parser: Any, more: str = "") -> None:
    """``--model PRESET|FILE.json`` (``nxrs train``, ``nxrs sweep``; ``parser`` may be a
    mutually exclusive group); ``more``: what else the command says of it."""
    parser.add_argument(
        "--model",
        default=None,
        type=nonempty_text,
        metavar="PRESET|FILE.json",
        help="a model of layer objects: a preset ("
        + ", ".join(layers.PRESETS)
        + ", each with its data set, batch size, learning rate and epochs unless given) or a "
        "JSON file of layer objects (docs/TRAINING.md section 15.1)" + more,
    )


def given(args: Any, option: str) -> bool:
    """Whether the command line gave ``option`` (or an abbreviation argparse took for it)."""
    for token in getattr(args, "argv", []):
        name = token.split("=", 1)[0]
        if name.startswith("--") and len(name) > 2 and option.startswith(name):
            return True
    return False


def apply_recipe(args: Any) -> dict[str, Any]:
    """``--model PRESET``: the preset's data and settings (``nxrs.layers.RECIPES``) for every
    option the command line left out. Returns the recipe's settings the command has no option
    for (``nxrs sweep``'s batch size and learning rate, which are its configurations' keys)."""
    recipe = layers.RECIPES.get(getattr(args, "model", None) or "")
    rest: dict[str, Any] = {}
    for key, value in (recipe or {}).items():
        if not hasattr(args, key):
            rest[key] = value
        elif not given(args, "--" + key.replace("_", "-")):
            setattr(args, key, value)
    return rest


def model_layers(model: str) -> list[Any]:
    """``--model``: a preset's layers, or a JSON file's (``nxrs.layers.load_model``); a name
    that is neither is a ``CliError`` naming the presets."""
    if model in layers.PRESETS:
        return list(layers.preset(model))
    try:
        return list(layers.load_model(model))
    except FileNotFoundError:
        raise CliError(
            f"--model {model!r} is neither a preset ({', '.join(layers.PRESETS)}) nor a file: "
            "no such file"
        ) from None


def run_options(args: Any, stop: StopFlag | None) -> dict[str, Any]:
    """``nxrs train``'s run directory options as ``fit``'s keywords (the run directory, save
    points, resume, keep, background saves, progress) and its own channels (the stop flag, the
    command recorded in the manifest, stderr lines)."""
    return {
        "checkpoint": args.ckpt_dir,
        "every": args.every,
        "every_seconds": getattr(args, "every_seconds", None),
        "resume": args.resume,
        "keep": 3 if args.keep is None else args.keep,
        "async_save": getattr(args, "async_save", None),
        "progress": None if not args.json else False,
        "_stop": stop,
        "_command": ["nxrs", *getattr(args, "argv", sys.argv[1:])],
        "_say": lambda line: print(f"nxrs train: {line}", file=sys.stderr, flush=True),
    }


def final_checkpoint(history: Any, ckpt_dir: str | Path | None) -> str | None:
    """The run's last checkpoint: the one ``fit`` wrote last, else the run directory's newest
    (a run already complete); on object storage its URL, not its local cached copy."""
    checkpoint: Path | str | None = history.checkpoint
    if checkpoint is None and ckpt_dir is not None:
        latest = nxrs.CheckpointManager(ckpt_dir).latest()
        checkpoint = None if latest is None else latest.path
    if checkpoint is not None and isinstance(ckpt_dir, str):
        checkpoint = f"{ckpt_dir.rstrip('/')}/{Path(checkpoint).name}"
    return None if checkpoint is None else str(checkpoint)


def trainer_options(args: Any) -> dict[str, Any]:
    """``nxrs train``'s settings as ``Trainer``'s keywords: the configuration it has options for
    (math, optimiser, learning rate, seed, batch size) and how this machine computes (backend,
    threads)."""
    return {
        "math": args.math,
        "optimizer": args.optimizer,
        "lr": args.lr,
        "seed": args.seed,
        "batch_size": args.batch_size,
        "backend": getattr(args, "backend", "auto"),
        "threads": getattr(args, "threads", None),
    }
