"""Type stubs of the compiled extension ``nxrs._nxrs`` (Rust, PyO3)."""

from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from pathlib import Path
from typing import Any, Literal, Protocol, SupportsIndex, TypeVar, final, overload

import numpy as np
import numpy.typing as npt
from _typeshed import StrOrBytesPath
from typing_extensions import Self, disjoint_base

__all__ = [
    "_CHUNK_SECONDS",
    "BadMagicError",
    "BusyError",
    "CheckpointError",
    "ChecksumError",
    "ConfigError",
    "Dataset",
    "EpochEnd",
    "HeaderError",
    "InputError",
    "LengthError",
    "MismatchError",
    "NxrsError",
    "RunChunk",
    "UnsupportedVersionError",
    "_Checkpoint",
    "_Claim",
    "_Snapshot",
    "_Trainer",
    "__version__",
    "_config_differences",
    "_data_digest",
    "_layer_table",
    "checkpoint_format",
    "clip",
    "config_schema",
    "f32_binary",
    "f32_compare",
    "f32_cos_pi",
    "f32_from_i64",
    "f32_to_i32",
    "f32_to_i64",
    "f32_unary",
    "hardware_isa",
    "permutation",
    "seed_dataset",
    "sweep_temp_files",
]
__version__: str

_T = TypeVar("_T")
_Floats = npt.NDArray[np.float32]
# A gradient block of ``_batch_blocks``: its sums, losses, samples right, BatchNorm statistics.
_Block = tuple[Sequence[_Floats], _Floats, int, Sequence[_Floats]]

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

class _LayerObject(Protocol):
    """A layer object (``nxrs.layers``): what ``Trainer(layers=...)`` reads of it."""

    def to_dict(self) -> dict[str, Any]: ...

@disjoint_base
class _Trainer:
    """The compiled trainer: ``nxrs.Trainer`` (``python/nxrs/_trainer.py``) subclasses it,
    adding no slots, and documents the class; the methods below are its methods. The class
    methods that build a trainer give an instance of the class they are called on."""

    def __new__(
        cls,
        layers: Sequence[SupportsIndex]
        | npt.NDArray[np.integer[Any]]
        | Sequence[_LayerObject | Mapping[str, Any]]
        | None = None,
        *,
        seed: SupportsIndex | None = None,
        sizes: Sequence[SupportsIndex] | npt.NDArray[np.integer[Any]] | None = None,
        loss: Literal["cross_entropy", "mse"] | None = None,
        math: Literal["seed", "ieee"] | None = None,
        init: Literal["seed", "he", "glorot", "torch"] | None = None,
        optimizer: Literal["adam", "adamw", "sgd"] | None = None,
        lr: float | None = None,
        beta1: float | None = None,
        beta2: float | None = None,
        eps: float | None = None,
        weight_decay: float | None = None,
        decay_params: Literal["all", "matrices"] | None = None,
        momentum: float | None = None,
        schedule: Literal["constant", "linear", "step", "cosine"] | None = None,
        warmup_steps: SupportsIndex | None = None,
        total_steps: SupportsIndex | None = None,
        step_size: SupportsIndex | None = None,
        gamma: float | None = None,
        min_lr: float | None = None,
        clip_norm: float | None = None,
        batch_size: SupportsIndex | None = None,
        grad_block: SupportsIndex | None = None,
        shuffle: bool | None = None,
        drop_last: bool | None = None,
        backend: Literal["auto", "hw", "soft"] | None = None,
        threads: SupportsIndex | None = None,
    ) -> Self: ...
    @classmethod
    def seed_model(
        cls,
        seed: SupportsIndex = 1,
        *,
        backend: Literal["auto", "hw", "soft"] | None = None,
        threads: SupportsIndex | None = None,
    ) -> Self:
        """The seed program's model (``Trainer(seed=seed)``), on ``backend``."""
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
        the output values (mse), in the same exact arithmetic as training; a sequence model
        scored per token gives (N, T, classes)."""
    def predict(self, x: npt.ArrayLike) -> npt.NDArray[Any]:
        """Class indices, int64 (N,), the maximum of ``predict_proba`` by TRAINING.md section
        10's rule (cross-entropy; a sequence model scored per token: (N, T)); the outputs
        (mse)."""
    def generate(
        self,
        prompt: npt.ArrayLike,
        max_new_tokens: SupportsIndex,
        *,
        temperature: float = 1.0,
        top_k: SupportsIndex | None = None,
        seed: SupportsIndex = 0,
    ) -> npt.NDArray[np.int64]:
        """The token ids ``prompt`` (1-D) followed by ``max_new_tokens`` more, each drawn from
        a sequence model's next-token distribution (docs/TRAINING.md section 15.9): the most
        likely at ``temperature=0``, else from the softmax of the logits over ``temperature``
        (among the ``top_k`` most likely, when given), the draws keyed by ``seed``. One model,
        prompt and seed give the same ids on every machine, backend, thread count and vector
        path. InputError for a bad prompt, temperature or ``top_k``; changes nothing."""
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
    ) -> Self:
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
    def state_digest(self) -> str:
        """SHA-256 (64 hex digits) of the whole state and the configuration
        (``docs/TRAINING.md`` section 16): the same on every backend, thread count, worker
        count and machine, whatever file the state was read from. A run's transcript records
        it for each checkpoint; ``nxrs verify`` compares it.

        >>> import nxrs
        >>> a, b = nxrs.Trainer(layers=[4, 3, 2]), nxrs.Trainer(layers=[4, 3, 2])
        >>> a.state_digest() == b.state_digest() and len(a.state_digest()) == 64
        True
        """
    def config_digest(self) -> str:
        """SHA-256 (64 hex digits) of the configuration alone (``docs/TRAINING.md`` section
        16): equal for two trainers exactly when they train the same way."""
    def state_dict(self) -> dict[str, npt.NDArray[np.float32]]:
        """Copies of every tensor (W1 b1 W2 b2 ... then the optimiser's slots), weights
        shaped (out, in)."""
    def to_bytes(self) -> bytes:
        """The whole state as the bytes of an NXCK v2 file, as ``save`` writes it (no
        metadata): for pickling and sending. ``Trainer.from_bytes`` reads them back."""
    def _snapshot(self, into: _Snapshot | None = None) -> _Snapshot:
        """A copy of the whole state (no working memory), taken with the GIL released, for a
        save in the background (``fit(async_save=True)``): a new one, or ``into`` refilled in
        its own memory (returned; nothing may be using it)."""
    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        backend: Literal["auto", "hw", "soft"] | None = None,
        threads: SupportsIndex | None = None,
    ) -> Self:
        """A trainer rebuilt from checkpoint bytes (v2, or v1 read as the seed model), every
        checksum verified, as ``load`` rebuilds it from a file (CheckpointError subclasses)."""
    @classmethod
    def _from_checkpoint(cls, checkpoint: _Checkpoint) -> Self:
        """A trainer holding an open checkpoint's configuration and state (a copy); one
        opened with ``verify=False`` has its checksums checked now (ChecksumError)."""
    def _copy(self) -> Self:
        """An independent trainer of this class with the same state, configuration, backend
        and threads (``copy.copy``)."""
    def _start_from(
        self,
        params: Sequence[npt.ArrayLike],
        buffers: Sequence[npt.ArrayLike] | None = None,
    ) -> None:
        """Restarts from the parameters ``params`` (the state's tensors in its order: ``W1, b1,
        gamma2, ...``) and, when given, the running statistics ``buffers`` (``mean{n}, var{n},
        ...``): a new run's state with them."""
    def _claim(self, call: str) -> _Claim:
        """Claims the trainer for ``call``, a method implemented in Python (``fit``), until
        the context manager exits: BusyError while another thread changes the trainer."""
    def _dataset(self, x: npt.ArrayLike, y: npt.ArrayLike) -> Dataset: ...
    def _stream(self, tokens: npt.ArrayLike) -> Dataset:
        """A token stream (1-D integer ids) as a data set of this sequence model's windows
        (docs/TRAINING.md section 15.8), checked once."""
    def _stream_windows(
        self, dataset: Dataset, count_: SupportsIndex, part: SupportsIndex
    ) -> Dataset:
        """``count_`` windows of the token stream ``dataset`` drawn from the evaluation stream
        of ``part`` (0 training, 1 validation): the same at every call."""
    def _evaluate(self, dataset: Dataset) -> tuple[float, float | None]:
        """``(loss, accuracy)`` on a data set (``_dataset``'s or ``_stream_windows``')."""
    def _run(
        self,
        dataset: Dataset,
        epochs: SupportsIndex,
        max_steps: SupportsIndex | None = None,
        max_seconds: float | None = None,
        epoch_end: bool = False,
        steps: SupportsIndex | None = None,
    ) -> RunChunk:
        """Trains on ``dataset`` towards ``epochs`` complete epochs (a token stream: towards
        ``steps`` steps in all), returning after at most ``max_steps`` steps, about
        ``max_seconds`` (the GIL released meanwhile) or, with ``epoch_end``, an epoch's end:
        what it did."""
    def _batch_blocks(self, dataset: Dataset) -> list[list[int]]:
        """The current batch's gradient blocks: sample indices into ``dataset``, in order."""
    def _block_gradient(
        self, dataset: Dataset, samples: Sequence[int], first_sample: int = 0
    ) -> tuple[
        list[npt.NDArray[np.float32]], npt.NDArray[np.float32], int, list[npt.NDArray[np.float32]]
    ]:
        """One gradient block at the current parameters, its first sample at position
        ``first_sample`` of its batch: its sums (W1, b1, W2, b2, ...), each sample's loss, the
        samples classified correctly and its BatchNorm statistics. Changes nothing."""
    def _params(self) -> list[npt.NDArray[np.float32]]:
        """The parameters (W1, b1, W2, b2, ...) as float32 arrays."""
    def _set_params(self, arrays: Sequence[npt.NDArray[np.float32]], step: int = 0) -> None:
        """Replaces the weights and biases (W1, b1, W2, b2, ..., bit for bit) and the step
        count, nothing else."""
    def _apply_blocks(
        self,
        dataset: Dataset,
        blocks: Sequence[_Block],
    ) -> RunChunk:
        """The current batch's step from its blocks in ``_batch_blocks`` order, as ``_run``
        takes it: the ``RunChunk`` of that one step."""
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
    def _batches_per_epoch(self, samples: int) -> int:
        """Batches (optimiser steps) in one epoch of ``samples`` samples (the core's rule)."""
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
        """Layer sizes, inputs first; for layer objects, the cells per sample at every layer
        boundary (the input's, then each layer's output's)."""
    @property
    def hyperparameters(self) -> dict[str, float]:
        """lr, beta1, beta2, eps, weight_decay, momentum as the binary32 values in use."""
    @property
    def scheduled_lr(self) -> float:
        """The learning rate of the next step: TRAINING.md section 6's ``lr_t`` at
        ``t = steps``, the binary32 value (widened exactly)."""
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
    def digest(self) -> str:
        """SHA-256 of the data as nxrs trains on it (``docs/TRAINING.md`` section 16): 64 hex
        digits."""
    @property
    def features(self) -> int:
        """Features per sample."""
    @property
    def is_stream(self) -> bool:
        """Whether this is a token stream's windows (``Trainer._stream``)."""
    def __len__(self) -> int: ...

@final
class _Claim:
    """A claim on a trainer (``_Trainer._claim``), released on leaving its ``with`` block."""

    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...

@final
class EpochEnd:
    """An epoch that ended in a call of the training loop."""

    @property
    def epoch(self) -> int:
        """The epoch's index (0-based): ``epoch + 1`` epochs are complete after it."""
    @property
    def loss(self) -> float:
        """The mean of its step losses (binary32, summed in order)."""
    @property
    def accuracy(self) -> float | None:
        """Correct / samples seen (None for mse)."""
    @property
    def samples(self) -> int:
        """The samples its steps saw."""
    @property
    def whole(self) -> bool:
        """Whether the trainer ran every step of the epoch, from its first batch (not after a
        resume inside it)."""

@final
class RunChunk:
    """What one call of the training loop did (``_Trainer._run``, ``_apply_blocks``, the Ray
    engine's ``run``): the epochs that ended, in order, the steps taken and the last step's
    loss (None without a step)."""

    def __new__(
        cls, *, epochs: Sequence[EpochEnd], steps: int, last_loss: float | None
    ) -> Self: ...
    @property
    def epochs(self) -> list[EpochEnd]: ...
    @property
    def steps(self) -> int: ...
    @property
    def last_loss(self) -> float | None: ...

@final
class _Snapshot:
    """A copy of a trainer's configuration and state (``Trainer._snapshot``), immutable; its
    methods release the GIL."""

    def save(self, path: StrOrBytesPath, *, metadata: Sequence[tuple[str, str]]) -> None:
        """Writes the copy as ``Trainer.save(path, metadata=...)`` would have written the
        trainer when it was taken: the same bytes, crash-safely."""
    def state_digest(self) -> str:
        """``Trainer.state_digest()`` of the trainer when the copy was taken."""
    @property
    def steps(self) -> int:
        """Optimiser steps taken when the copy was taken."""
    @property
    def epoch(self) -> int:
        """Completed epochs when the copy was taken."""
    @property
    def batch(self) -> int:
        """Batches of the current epoch done when the copy was taken."""

@disjoint_base
class _Checkpoint(Mapping[str, npt.NDArray[np.float32]]):
    """The compiled checkpoint: ``nxrs.Checkpoint`` (``python/nxrs/_checkpoint.py``, which
    documents it) subclasses it, adding no slots, and adds ``to_trainer``. A read-only mapping
    from tensor names, in file order, to read-only float32 arrays viewing the mapped file."""

    def __new__(cls, path: StrOrBytesPath, *, verify: bool = True) -> Self:
        """Opens and validates an NXCK v2 file (``nxrs.open``)."""
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
    def close(self) -> None:
        """Stops access through this object; arrays already taken stay valid."""
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...

def _data_digest(
    train: Dataset, validation: Dataset | None = None, test: Dataset | None = None
) -> str: ...
def permutation(
    seed: SupportsIndex, domain: str, index: SupportsIndex, n: SupportsIndex
) -> list[int]:
    """The permutation of ``n`` items from the stream ``(seed, domain, index)`` (TRAINING.md
    section 9); ``domain`` is "init", "shuffle" or "split"."""

def checkpoint_format(path: StrOrBytesPath) -> int:
    """The NXCK format version of a file (1 or 2), from its first 12 bytes."""

def sweep_temp_files(directory: StrOrBytesPath) -> list[Path]:
    """Removes temporary files left by interrupted saves whose writer is gone; returns them."""

#: The longest stretch (seconds) training holds the GIL released and Ctrl-C waits: the Rust
#: loops' chunk, which ``fit`` uses too (``nxrs._train.fit`` reads it as ``_CHUNK_SECONDS``).
_CHUNK_SECONDS: float

def hardware_isa() -> str | None:
    """The vector instructions the hardware backend computes with in this process.

    ``"avx512"``, ``"avx2"`` or ``"portable"``: the widest the CPU has, unless the environment
    variable ``NXRS_ISA`` (read once per process) names another. None where the hardware backend
    is unavailable (another target, a failed self-check, or an ``NXRS_ISA`` the CPU lacks). Every
    path gives the same bits; only the speed differs.

    >>> hardware_isa() in {"avx512", "avx2", "portable", None}
    True
    """

def _layer_table(layers: Sequence[_LayerObject | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The checked layer list, one row per layer after ``Input`` (nested ones depth first):
    ``position``, ``type``, ``depth`` (the Residuals it is in), ``input`` and ``output`` shapes
    and ``tensors`` (``(name, shape)`` pairs, section 15.4's names). ConfigError as
    ``Trainer(layers=...)`` gives it."""

def config_schema() -> list[dict[str, Any]]:
    """Every setting of a trainer's configuration (``Trainer(...)``'s keywords but ``backend``
    and ``threads``), in ``docs/TRAINING.md``'s order, as dicts: ``name``, ``type`` ("sizes",
    "int", "float", "str" or "bool"), ``choices`` (the accepted names, or None), ``optional``
    (whether None is a value of its own), ``default`` (``{"general": ..., "seed_model": ...}``:
    ``Trainer(layers=...)``'s and the seed model's), ``default_adamw`` (the default with
    ``optimizer="adamw"`` where it differs, else None), ``default_layer_objects`` (the default
    for a model of layer objects where it differs, else None), ``default_cosine`` (the default
    with ``schedule="cosine"`` of a setting of that schedule alone, ``min_lr``, else None),
    ``min`` (an integer's smallest value, or None), ``range`` (the accepted values, as text)
    and ``doc``.

    >>> [s["default"]["general"] for s in config_schema() if s["name"] == "batch_size"]
    [32]
    """

def _config_differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """The keys in which two configuration dicts differ (``nxrs._util.config.config_diff``)."""

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
def f32_cos_pi(k: npt.NDArray[np.int64], n: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]: ...
