"""Type stubs of the compiled extension ``nxrs._nxrs`` (Rust, PyO3)."""

import os
from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from pathlib import Path
from typing import Any, Literal, SupportsIndex, TypeVar, final, overload

import numpy as np
import numpy.typing as npt
from _typeshed import StrOrBytesPath

from nxrs._fit import History
from nxrs.manager import CheckpointManager

__all__ = [
    "BadMagicError",
    "BusyError",
    "Checkpoint",
    "CheckpointError",
    "ChecksumError",
    "ConfigError",
    "Dataset",
    "HeaderError",
    "InputError",
    "LengthError",
    "MismatchError",
    "NxrsError",
    "Trainer",
    "UnsupportedVersionError",
    "__version__",
    "_config_differences",
    "checkpoint_format",
    "clip",
    "config_schema",
    "f32_binary",
    "f32_compare",
    "f32_from_i64",
    "f32_to_i32",
    "f32_to_i64",
    "f32_unary",
    "open",
    "permutation",
    "seed_dataset",
    "sweep_temp_files",
]
__version__: str

_T = TypeVar("_T")

class NxrsError(Exception):
    """Base class of every error nxrs raises."""

class ConfigError(NxrsError, ValueError):
    """A setting that cannot be used: a trainer configuration that cannot be built, or another
    parameter's value out of its range or of the wrong type. Also a ValueError."""

class InputError(NxrsError, ValueError):
    """A sample, label or dataset that does not fit the model. Also a ValueError."""

class BusyError(NxrsError):
    """A call that would change a trainer while another thread is changing it (its fit, step,
    restore, ...); reading it meanwhile is allowed."""

class MismatchError(NxrsError):
    """A checkpoint or run directory of another run: another model, configuration or data than
    the trainer and data given. Not a CheckpointError: the file itself is sound."""

class CheckpointError(NxrsError):
    """A checkpoint that cannot be read."""

class BadMagicError(CheckpointError):
    """The file is not an NXCK checkpoint."""

class UnsupportedVersionError(CheckpointError):
    """An NXCK format version this build cannot read."""

class LengthError(CheckpointError):
    """The file is truncated, or longer than its header says."""

class HeaderError(CheckpointError):
    """A header field is out of range or inconsistent."""

class ChecksumError(CheckpointError):
    """Stored and computed checksums differ."""

@final
class Trainer:
    """Bit-reproducible MLP training on softf32 (``docs/TRAINING.md`` defines every bit).

    Two families of configurations, every keyword defaulting to its family's value
    (``nxrs.config_schema()`` lists every setting with both defaults; ``docs/TRAINING.md``
    section 1):

    - ``Trainer(layers=[n_in, ..., n_out], ...)``, the general trainer, with TRAINING.md's
      defaults: cross-entropy, "ieee" math, He init, Adam, shuffled batches (AdamW decays the
      weights by default, the others do not).
    - ``Trainer()`` / ``Trainer(seed=1)`` / ``Trainer.seed_model()``: the seed program's model
      (its layer sizes, math, init, seed, Adam, one sample per step, no shuffle); ``sizes=``
      changes its layer sizes (``layers`` and ``sizes`` together is a ConfigError), other
      keywords override its values. A keyword that is not a setting is a TypeError.

    ``seed`` is any int in -2**63 ..= 2**63 - 1 (ConfigError outside). Layer sizes need at least
    two entries, each in 1 ..= 2**24, with at most 2**28 parameters in all (ConfigError).

    Every integer parameter (``seed``, the entries of ``layers`` and ``sizes``, which may be any
    sequence or 1-D array, ``batch_size``, ``grad_block``, the schedule's step counts,
    ``threads``, and the counts of ``train_until``, ``train_steps`` and ``seed_dataset``) takes
    any integer ``operator.index`` accepts (``int``, numpy integers) except a bool; a bool, a
    float (even ``2.0``), a string or a numpy bool is refused, naming the parameter
    (ConfigError, or InputError for a training call's count), never truncated or read as 1.
    These stubs type such a count ``typing.SupportsIndex`` (a bool passes the type check, as
    ``bool`` is an ``int``, and is refused when called).

    Hyperparameters given as Python floats are rounded to binary32 (to nearest even), then
    checked (ConfigError naming the parameter, the value and the accepted range): ``lr`` and
    ``eps`` finite, positive and normal as binary32 (so ``lr=1e40``, which rounds to inf, and
    ``eps=1e-40``, a subnormal, are refused), ``beta1``, ``beta2`` and ``momentum`` in [0, 1),
    ``weight_decay`` finite and >= 0 (0 for "adam"; "momentum" only for "sgd").

    ``backend`` chooses the arithmetic that computes steps, evaluations and predictions (the
    same bits either way; not part of the configuration, the state or a checkpoint, so a run
    saved under one backend resumes under the other): "soft" is softf32 (integer operations),
    "hw" the CPU's binary32 ``+ - * /`` and ``sqrt`` under a floating-point environment guard
    (round to nearest, FTZ/DAZ off, restored after every call), verified once per process
    against softf32 on a fixed set of hard cases. "hw" where it is unavailable (a target other
    than x86_64/aarch64, or a self-check disagreement) is a ConfigError saying why; "auto" (the
    default, None) takes "hw" where available, else "soft" (with a RuntimeWarning naming the
    case when the self-check disagreed). ``trainer.backend`` is the one in use, and is settable.

    ``threads`` is how many threads training, evaluation and prediction use (1 to 1024; None,
    the default: the cores available to the process). Like the backend it is not part of the
    configuration or the state: every value's operations and their order are the same on any
    number of threads, so the bits are too. Work too small to gain from a thread stays on one.
    ``trainer.threads`` is settable.

    One trainer may be used from several Python threads. Reading it (``steps``, ``config``,
    ``predict``, ``state_hash()``, ``to_bytes()``, ``save()``, ...) always works, also while
    another thread trains it: a read waits for the chunk of steps in progress (about 0.1 s at
    most) and sees the state between two steps. A call that changes the trainer (``fit``,
    ``step``, ``train_until``, ``train_steps``, ``restore``, setting ``backend`` or
    ``threads``) while another thread is in such a call raises ``BusyError`` and changes
    nothing; a run in progress is never disturbed, so its bits are an undisturbed run's.

    ``pickle``, ``copy.copy`` and ``copy.deepcopy`` give an independent trainer with the same
    state and configuration, bit for bit (pickling goes through ``to_bytes``/``from_bytes``). A
    copy keeps the backend and threads; an unpickled trainer has the unpickling process's
    defaults (``backend="auto"``, ``threads=None``), as they describe a machine, not the run.

    >>> t = Trainer(layers=[4, 8, 3], batch_size=2, lr=0.01)
    >>> t.config["math"], t.config["batch_size"], t.steps
    ('ieee', 2, 0)
    """

    def __new__(
        cls,
        layers: Sequence[SupportsIndex] | npt.NDArray[np.integer[Any]] | None = None,
        *,
        seed: SupportsIndex | None = None,
        sizes: Sequence[SupportsIndex] | npt.NDArray[np.integer[Any]] | None = None,
        loss: Literal["cross_entropy", "mse"] | None = None,
        math: Literal["seed", "ieee"] | None = None,
        init: Literal["seed", "he", "glorot"] | None = None,
        optimizer: Literal["adam", "adamw", "sgd"] | None = None,
        lr: float | None = None,
        beta1: float | None = None,
        beta2: float | None = None,
        eps: float | None = None,
        weight_decay: float | None = None,
        momentum: float | None = None,
        schedule: Literal["constant", "linear", "step"] | None = None,
        warmup_steps: SupportsIndex | None = None,
        total_steps: SupportsIndex | None = None,
        step_size: SupportsIndex | None = None,
        gamma: float | None = None,
        clip_norm: float | None = None,
        batch_size: SupportsIndex | None = None,
        grad_block: SupportsIndex | None = None,
        shuffle: bool | None = None,
        drop_last: bool | None = None,
        backend: Literal["auto", "hw", "soft"] | None = None,
        threads: SupportsIndex | None = None,
    ) -> Trainer: ...
    @classmethod
    def seed_model(
        cls,
        seed: SupportsIndex = 1,
        *,
        backend: Literal["auto", "hw", "soft"] | None = None,
        threads: SupportsIndex | None = None,
    ) -> Trainer:
        """The seed program's model (``Trainer(seed=seed)``), on ``backend``."""
    def fit(
        self,
        x: npt.ArrayLike,
        y: npt.ArrayLike,
        epochs: SupportsIndex,
        *,
        validation_data: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
        checkpoint: str | os.PathLike[str] | CheckpointManager | None = None,
        every: SupportsIndex | None = None,
        every_seconds: float | None = None,
        resume: bool = True,
        progress: bool | None = None,
        engine: Literal["local", "ray"] = "local",
        workers: SupportsIndex | None = None,
        ray_address: str | None = None,
    ) -> History:
        """Trains until ``epochs`` epochs are complete; returns the history of this call.

        ``epochs`` is the final epoch count, as Keras reads ``epochs`` with ``initial_epoch``:
        a trainer at step 70 of epoch 3 finishes epoch 3 first and stops after epoch ``epochs``.
        It is a count of at least 1 (an int or numpy integer, not a bool or float; ConfigError
        otherwise). When the trainer, or the run it resumes, already completed ``epochs``
        epochs, nothing is trained and ``nxrs.NothingToTrainWarning`` says so. ``x``, ``y``
        follow the input rules of ``train_until``; for ``loss="mse"`` ``y`` holds float
        targets, shape (N, n_out) or (N,) when n_out is 1. ``validation_data=(x_val, y_val)`` is
        evaluated after every epoch.

        ``checkpoint``: a run directory (checkpoints by a ``CheckpointManager`` with ``keep=3``,
        the manifest ``nxrs-run.json`` and the lock ``.nxrs-run.lock``; see ``nxrs.rundir``)
        or a ``CheckpointManager`` (its directory becomes the run directory). Checkpoints are
        named by the global step and written crash-safely when the step count is a multiple of
        ``every`` (if given), at the first step boundary ``every_seconds`` after the previous
        save (if given), and at the end. Each records the data's fingerprint and nxrs's version
        (``nxrs.open(p).metadata``). The directory is locked for the call: another process's
        ``fit`` or ``nxrs train`` on it raises ``nxrs.rundir.RunLockedError``.

        With ``resume=True`` (the default) the newest valid checkpoint there is restored first;
        MismatchError (nothing changed) when the directory holds a run of another configuration
        or other data (manifest or checkpoint), a checkpoint not written by ``fit`` (no
        fingerprint, or a v1 file), or a manifest that is not a valid one
        (``nxrs.rundir.ManifestError``). With ``resume=False`` the run starts over from the trainer
        as it is: the directory's checkpoints and manifest are first moved aside to
        ``previous/<UTC time>/``.

        In the main thread, with a checkpoint, SIGINT and SIGTERM are caught for the call (the
        previous handlers restored after it): the step under way finishes (within about 0.1 s),
        a checkpoint of it is saved, the stop is recorded in the manifest, and
        ``nxrs.rundir.RunStopped`` (a KeyboardInterrupt) is raised. A periodic save that fails
        is reported with ``nxrs.rundir.SaveFailedWarning`` and retried at the next save point;
        the final one (or a stop's) raises ``nxrs.rundir.CheckpointSaveError`` (an OSError). In
        either case the previous checkpoint is intact.

        The GIL is released while computing. Without a checkpoint (or outside the main thread)
        Ctrl-C stops at a step boundary, saves a checkpoint when one is configured, and
        re-raises KeyboardInterrupt. ``progress``: a tqdm bar with epoch, loss and samples/s; by
        default only when stderr is a terminal.

        Every other setting is checked before anything is read or changed: ``every`` and
        ``workers`` are counts of at least 1, ``every_seconds`` a positive number, ``every``
        and ``every_seconds`` need a ``checkpoint``, ``engine`` is "local" or "ray", and
        ``workers`` and ``ray_address`` need "ray" (ConfigError, a ValueError, otherwise).

        ``engine="ray"`` computes each step's gradient blocks on ``workers`` Ray actors (by
        default one per CPU of the cluster; each reserves a CPU: a cluster this process started
        with fewer CPUs is a ConfigError at once) with ``nxrs.distributed``
        (``pip install 'nxrs[ray]'``), and ends in the same bits as ``engine="local"`` for any
        number of workers. Ray is used as already initialised, else at ``ray_address`` (or
        ``RAY_ADDRESS``), else a local cluster is started. A worker whose process dies is
        restarted by Ray and its part of the step recomputed (logged as a warning by the
        ``nxrs.distributed`` logger); checkpoints, resume and stopping work as with
        ``engine="local"``.
        """
    def step(self, x: npt.ArrayLike, y: npt.ArrayLike) -> float:
        """One optimiser step on one sample; returns its loss (before the update).

        ``x`` holds the features (1-D) and ``y`` the label (or, for mse, the targets), under
        the rules of ``train_until``. Counts a step, not an epoch or batch. Raises InputError
        for a bad sample; the trainer is then unchanged.
        """
    def train_until(self, x: npt.ArrayLike, y: npt.ArrayLike, epoch: SupportsIndex) -> None:
        """Trains until ``epoch`` epochs are complete (TRAINING.md section 3), continuing with
        batch ``batch`` of epoch ``epoch``. Nothing happens if they already are. The GIL is
        released while training; Ctrl-C is honoured between chunks of steps. ``epoch`` is a
        count (see the class): at least 0 (InputError otherwise).

        ``x`` (samples, features): float32 as is; float64 is rounded to float32 to nearest by
        numpy (``x.astype(np.float32)``); every other dtype is refused. ``y`` (samples,): any
        numpy integer dtype, signed or unsigned, converted exactly; floats, bools and objects
        are refused (for ``loss="mse"``: float targets as ``x``, (samples, n_out), or
        (samples,) when n_out is 1). Lists and other array-likes go through ``np.asarray``
        first. InputError for a refused dtype, a wrong number of dimensions or features,
        lengths that differ, no samples, more than 2**28 feature values, a NaN or infinite
        feature or target, a label outside 0 ..< n_out, or an ``epoch`` that is negative, not
        an integer or beyond 64 bits; the trainer is then unchanged.
        """
    def train_steps(self, x: npt.ArrayLike, y: npt.ArrayLike, steps: SupportsIndex) -> list[float]:
        """``steps`` optimiser steps in the epoch structure (as ``train_until``); their losses."""
    def predict_proba(self, x: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """The model's outputs, float32 (N, n_out): softmax probabilities (cross-entropy) or
        the output values (mse), in the same exact arithmetic as training."""
    def predict(self, x: npt.ArrayLike) -> npt.NDArray[Any]:
        """Class indices, int64 (N,), the maximum of ``predict_proba`` by TRAINING.md section
        10's rule (cross-entropy); the outputs (mse)."""
    def evaluate(self, x: npt.ArrayLike, y: npt.ArrayLike) -> tuple[float, float | None]:
        """``(loss, accuracy)`` on ``(x, y)``: the mean sample loss (binary32) and correct / N;
        accuracy is None for mse. Changes nothing."""
    def save(
        self,
        path: StrOrBytesPath,
        *,
        format: Literal["v1", "v2"] = "v2",
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """Writes the whole training state to ``path``, crash-safely.

        A temporary file in the same directory is written, fsynced and renamed over ``path``,
        then the directory is fsynced: after a crash at any instant ``path`` is the complete old
        file or the complete new one. "v2" (the default) is self-describing and checksummed,
        with optional string ``metadata``; "v1" is the seed program's layout, which loads as
        the seed model (``Trainer.seed_model()``) at the start of an epoch, so it holds only
        that model at an epoch boundary: any other trainer (other sizes, seed, hyperparameters,
        optimiser, ..., or a position inside an epoch) is a ConfigError naming what v1 lacks,
        raised before the file is touched. v1 holds no step counter (it loads as 0; the seed
        model never reads it) and no metadata (InputError).
        """
    @classmethod
    def load(
        cls,
        path: StrOrBytesPath,
        *,
        backend: Literal["auto", "hw", "soft"] | None = None,
        threads: SupportsIndex | None = None,
    ) -> Trainer:
        """A trainer rebuilt from a checkpoint, every checksum verified.

        A v2 file carries its configuration; a v1 file is read as the seed model with its step
        counter at 0 (v1 holds none). The file is read (not mapped), once, straight into the
        trainer's tensors, so a program rewriting it meanwhile cannot crash the process: the
        load gives a CheckpointError instead. Only regular files are read (an OSError with
        errno EINVAL for a FIFO, socket or device; IsADirectoryError).
        """
    def restore(self, path: StrOrBytesPath) -> None:
        """Replaces this trainer's whole state with the checkpoint's (v1 or v2).

        A v2 file must hold this trainer's configuration, seed included (MismatchError
        otherwise). On any error nothing changes. The file is read as by ``load``.
        """
    def hash(self) -> int:
        """The seed program's state hash (``hstate``) of the weights."""
    def state_hash(self) -> int:
        """64-bit FNV-1a over the whole state: every tensor, then epoch, b1t, b2t, step, batch."""
    def state_dict(self) -> dict[str, npt.NDArray[np.float32]]:
        """Copies of every tensor (W1 b1 W2 b2 ... then the optimiser's slots), weights
        shaped (out, in)."""
    def __reduce__(self) -> tuple[Any, tuple[bytes]]: ...
    def __copy__(self) -> Trainer: ...
    def __deepcopy__(self, memo: Any, /) -> Trainer: ...
    def to_bytes(self) -> bytes:
        """The whole state as the bytes of an NXCK v2 file, as ``save`` writes it (no
        metadata): for pickling and sending. ``Trainer.from_bytes`` reads them back."""
    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        backend: Literal["auto", "hw", "soft"] | None = None,
        threads: SupportsIndex | None = None,
    ) -> Trainer:
        """A trainer rebuilt from checkpoint bytes (v2, or v1 read as the seed model), every
        checksum verified, as ``load`` rebuilds it from a file (CheckpointError subclasses)."""
    def _start_from(self, weights: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]]) -> None: ...
    @classmethod
    def from_weights(
        cls, weights: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]], **config: Any
    ) -> Trainer:
        """A trainer at the start of a run whose parameters are ``weights``, ``[(W1, b1), (W2,
        b2), ...]`` (``Wl`` shaped (outputs, inputs) as ``torch.nn.Linear.weight``, ``bl``
        (outputs,); the layer sizes come from the shapes; values under ``fit``'s input rules).
        ``config``: the keywords of ``Trainer(layers=...)`` but ``layers``. The optimiser starts
        fresh (zero moments, step 0). InputError for weights that make no model, ConfigError
        for the configuration (``nxrs.interop.from_weights``)."""
    def to_torch(self, *, softmax: bool = False) -> Any:
        """The model as a ``torch.nn.Sequential`` of ``Linear`` and ``ReLU`` (float32, CPU),
        ending in ``Softmax(dim=-1)`` when ``softmax`` (cross-entropy models only, ConfigError
        otherwise). Needs torch (``pip install 'nxrs[torch]'``; ImportError naming it)."""
    @classmethod
    def from_torch(cls, module: Any, **config: Any) -> Trainer:
        """A trainer starting from a torch module's weights: a ``Linear`` with bias, or a
        ``Sequential`` of them with ``ReLU`` between each two and optionally a final
        ``Softmax(dim=-1)``; any other layer is a ConfigError naming it. ``config`` as for
        ``from_weights``."""
    def save_safetensors(self, path: str | os.PathLike[str], *, moments: bool = False) -> None:
        """Writes the weights ``W1 b1 ... WL bL`` (float32, shaped as in a checkpoint) and, with
        ``moments``, the optimiser's slots (``mW1 vW1 ...``) to ``path`` in the safetensors
        format, crash-safely. Not a checkpoint: see ``nxrs.interop.save_safetensors`` for what
        only NXCK keeps. Needs safetensors (``pip install 'nxrs[safetensors]'``)."""
    @classmethod
    def from_safetensors(cls, path: str | os.PathLike[str], **config: Any) -> Trainer:
        """A trainer starting from the weights in a safetensors file written by
        ``save_safetensors`` (optimiser slots there are not used). ``config`` as for
        ``from_weights``."""
    def to_onnx(self, path: str | os.PathLike[str], *, softmax: bool | None = None) -> None:
        """Writes the model's inference as ONNX (opset 13: MatMul, Add, Relu, Softmax), checked
        by ``onnx.checker``: input ``input`` (batch, inputs) float32, output ``probabilities``
        (the default for cross-entropy), ``logits`` (``softmax=False``) or ``outputs`` (mse).
        Needs onnx (``pip install 'nxrs[onnx]'``)."""
    def _dataset(self, x: npt.ArrayLike, y: npt.ArrayLike) -> Dataset: ...
    def _run(
        self,
        dataset: Dataset,
        epochs: SupportsIndex,
        max_steps: SupportsIndex | None = None,
        max_seconds: float | None = None,
        epoch_end: bool = False,
    ) -> tuple[list[tuple[int, float, float | None, int, bool]], int, float | None]: ...
    def _batch_blocks(self, dataset: Dataset) -> list[list[int]]:
        """The current batch's gradient blocks: sample indices into ``dataset``, in order."""
    def _block_gradient(
        self, dataset: Dataset, samples: Sequence[int]
    ) -> tuple[list[npt.NDArray[np.float32]], npt.NDArray[np.float32], int]:
        """One gradient block at the current parameters: its sums (W1, b1, W2, b2, ...), each
        sample's loss, and the samples classified correctly. Changes nothing."""
    def _set_params(self, arrays: Sequence[npt.NDArray[np.float32]]) -> None:
        """Replaces the weights and biases (W1, b1, W2, b2, ..., bit for bit), nothing else."""
    def _apply_blocks(
        self,
        dataset: Dataset,
        blocks: Sequence[tuple[Sequence[npt.NDArray[np.float32]], npt.NDArray[np.float32], int]],
    ) -> tuple[list[tuple[int, float, float | None, int, bool]], int, float | None]:
        """The current batch's step from its blocks in ``_batch_blocks`` order, as ``_run``
        takes it; returns what ``_run`` returns for one step."""
    @property
    def epoch(self) -> int:
        """Completed epochs."""
    @property
    def batch(self) -> int:
        """Batches of the current epoch already done."""
    @property
    def backend(self) -> str:
        """The backend in use, "hw" or "soft"; set it to "auto", "hw" or "soft" (see the class)."""
    @backend.setter
    def backend(self, value: str) -> None: ...
    @property
    def threads(self) -> int:
        """The threads in use (see the class); set it to change them."""
    @threads.setter
    def threads(self, value: SupportsIndex) -> None: ...
    @property
    def steps(self) -> int:
        """Optimiser steps taken in total (``step`` of TRAINING.md section 3)."""
    @property
    def b1t(self) -> float:
        """``beta1**t`` after ``t`` steps, as the seed's running product."""
    @property
    def b2t(self) -> float:
        """``beta2**t`` after ``t`` steps."""
    @property
    def sizes(self) -> list[int]:
        """Layer sizes, inputs first."""
    @property
    def hyperparameters(self) -> dict[str, float]:
        """lr, beta1, beta2, eps, weight_decay, momentum as the binary32 values in use."""
    @property
    def config(self) -> dict[str, Any]:
        """The configuration with TRAINING.md's keys (binary32 values as floats)."""

@final
class Dataset:
    """Data converted and checked once for a trainer (``Trainer._dataset``)."""

    @property
    def fingerprint(self) -> str:
        """FNV-1a over the features' bits, labels or targets and shapes: 16 hex digits."""
    @property
    def features(self) -> int:
        """Features per sample."""
    def __len__(self) -> int: ...

@final
class Checkpoint(Mapping[str, npt.NDArray[np.float32]]):
    """An open, validated NXCK v2 checkpoint (from ``nxrs.open``).

    A read-only mapping from tensor names, in file order, to their arrays: ``len(ck)``,
    ``name in ck``, ``for name in ck``, ``keys()``, ``values()``, ``items()`` and ``get()``
    behave as on any ``collections.abc.Mapping`` (``isinstance(ck, Mapping)`` holds).

    ``ck[name]`` is a read-only float32 array viewing the memory-mapped file without copying;
    each array keeps the mapping alive, so it stays valid after ``close()``. Saving over the file
    does not change what open arrays show (saves replace the file, never rewrite it). A program
    that rewrites the file *in place* (``shutil.copyfile``, ``cp``) does change them, and can get
    the process killed by SIGBUS, as with numpy.memmap or safetensors: replace checkpoints by
    writing a new file and renaming it over the old one.

    >>> with nxrs.open("run.nxck") as ck:  # doctest: +SKIP
    ...     w1 = ck["W1"]
    """

    @property
    def path(self) -> Path:
        """The file's path."""
    @property
    def is_mapped(self) -> bool:
        """Whether tensors view a memory mapping."""
    @property
    def config(self) -> dict[str, Any]:
        """TRAINING.md's keys, ``sizes`` (the layers) and ``<key>_bits`` for binary32 values."""
    @property
    def scalars(self) -> dict[str, int]:
        """epoch, b1t_bits, b2t_bits, step, batch (as the file has them)."""
    @property
    def metadata(self) -> dict[str, str]:
        """Free-form strings: ``fit`` records ``data_fingerprint`` and ``nxrs_version``."""
    def tensor_table(self) -> list[dict[str, Any]]:
        """name, dtype, shape, offset, nbytes, crc32c of each tensor, in file order."""
    def keys(self) -> KeysView[str]:
        """The tensor names in file order."""
    def values(self) -> ValuesView[npt.NDArray[np.float32]]:
        """The tensors (read-only views) in file order."""
    def items(self) -> ItemsView[str, npt.NDArray[np.float32]]:
        """``(name, tensor)`` pairs in file order."""
    @overload
    def get(self, key: str, default: None = None, /) -> npt.NDArray[np.float32] | None:
        """``self[key]``, or ``default`` when there is no tensor named ``key``."""
    @overload
    def get(
        self, key: str, default: npt.NDArray[np.float32] | _T, /
    ) -> npt.NDArray[np.float32] | _T: ...
    def __iter__(self) -> Iterator[str]:
        """The tensor names in file order."""
    def __len__(self) -> int: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __getitem__(self, key: str, /) -> npt.NDArray[np.float32]:
        """A read-only view of the tensor (KeyError for any other key)."""
    def verify(self) -> None:
        """Checks every tensor's CRC-32C (ChecksumError naming the first bad tensor)."""
    def verify_tensor(self, name: str) -> None:
        """Checks one tensor's CRC-32C."""
    def to_trainer(self) -> Trainer:
        """A Trainer with this checkpoint's configuration and state (copied).

        Opened with ``verify=False``, the checksums are checked now (ChecksumError).
        """
    def close(self) -> None:
        """Stops access through this object; arrays already taken stay valid."""
    def __enter__(self) -> Checkpoint: ...
    def __exit__(self, *exc: object) -> None: ...

def open(path: StrOrBytesPath, *, verify: bool = True) -> Checkpoint:
    """Opens an NXCK v2 file: maps it, validates the header and (unless ``verify=False``) every
    tensor's CRC-32C. Raises a CheckpointError subclass naming what is wrong and where.

    The arrays view the mapping: do not rewrite the file in place while they are in use (see
    ``Checkpoint``). Only regular files are opened (OSError otherwise, as for ``Trainer.load``).
    """

def permutation(
    seed: SupportsIndex, domain: str, index: SupportsIndex, n: SupportsIndex
) -> list[int]:
    """The permutation of ``n`` items from the stream ``(seed, domain, index)`` (TRAINING.md
    section 9); ``domain`` is "init", "shuffle" or "split"."""

def checkpoint_format(path: StrOrBytesPath) -> int:
    """The NXCK format version of a file (1 or 2), from its first 12 bytes."""

def sweep_temp_files(directory: StrOrBytesPath) -> list[Path]:
    """Removes temporary files left by interrupted saves whose writer is gone; returns them."""

def config_schema() -> list[dict[str, Any]]:
    """Every setting of a trainer's configuration (``Trainer(...)``'s keywords but ``backend``
    and ``threads``), in ``docs/TRAINING.md``'s order, as dicts: ``name``, ``type`` ("sizes",
    "int", "float", "str" or "bool"), ``choices`` (the accepted names, or None), ``optional``
    (whether None is a value of its own), ``default`` (``{"general": ..., "seed_model": ...}``:
    ``Trainer(layers=...)``'s and the seed model's), ``default_adamw`` (the default with
    ``optimizer="adamw"`` where it differs, else None), ``min`` (an integer's smallest value, or
    None), ``range`` (the accepted values, as text) and ``doc``.

    >>> [s["default"]["general"] for s in config_schema() if s["name"] == "batch_size"]
    [32]
    """

def _config_differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """The keys in which two configuration dicts differ (``nxrs._config.config_diff``)."""

def clip(text: str) -> str:
    """``text`` cut as nxrs's error messages cut values read from a file: the first 100
    characters, then the full length."""

def seed_dataset(
    samples: SupportsIndex = 8, features: SupportsIndex = 6, classes: SupportsIndex = 4
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """The seed's synthetic dataset: x float32 (samples, features), y int64 (samples,).

    ``samples``, ``features`` and ``classes`` at least 1, ``samples * features`` at most 2**28
    (1 GiB of float32); InputError otherwise, negative values included.
    """

def f32_binary(
    op: str, a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]: ...
def f32_unary(op: str, a: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]: ...
def f32_compare(
    op: str, a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]
) -> npt.NDArray[np.bool_]: ...
def f32_to_i32(a: npt.NDArray[np.float32], mode: str) -> npt.NDArray[np.int32]: ...
def f32_to_i64(a: npt.NDArray[np.float32], mode: str) -> npt.NDArray[np.int64]: ...
def f32_from_i64(a: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]: ...
