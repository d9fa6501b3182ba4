"""Type stubs of the compiled extension ``nxrs._nxrs`` (Rust, PyO3)."""

from pathlib import Path
from typing import Any, Literal, final

import numpy as np
import numpy.typing as npt
from _typeshed import StrOrBytesPath

__all__ = [
    "BadMagicError",
    "Checkpoint",
    "CheckpointError",
    "ChecksumError",
    "ConfigError",
    "HeaderError",
    "InputError",
    "LengthError",
    "MismatchError",
    "NxrsError",
    "Trainer",
    "UnsupportedVersionError",
    "__version__",
    "checkpoint_format",
    "clip",
    "f32_binary",
    "f32_compare",
    "f32_from_i64",
    "f32_to_i32",
    "f32_to_i64",
    "f32_unary",
    "open",
    "seed_dataset",
    "sweep_temp_files",
]
__version__: str

class NxrsError(Exception):
    """Base class of every error nxrs raises."""

class ConfigError(NxrsError):
    """A trainer configuration that cannot be built."""

class InputError(NxrsError):
    """A sample, label or dataset that does not fit the model."""

class CheckpointError(NxrsError):
    """A checkpoint that cannot be loaded."""

class BadMagicError(CheckpointError):
    """The file is not an NXCK checkpoint."""

class UnsupportedVersionError(CheckpointError):
    """An NXCK format version this build cannot read."""

class LengthError(CheckpointError):
    """The file is truncated, or longer than its header says."""

class MismatchError(CheckpointError):
    """The checkpoint describes a different model."""

class HeaderError(CheckpointError):
    """A header field is out of range or inconsistent."""

class ChecksumError(CheckpointError):
    """Stored and computed checksums differ."""

@final
class Trainer:
    """Bit-reproducible MLP training with Adam, on softf32.

    ``Trainer(seed=1)`` is the seed program's model: 6 inputs, 10 ReLU hidden units, 4 softmax
    classes, weights from the seed's deterministic init, Adam with the seed's hyperparameters.

    ``seed`` is any int in -2**63 ..= 2**63 - 1 (ConfigError outside); the init is exact for
    all of them. ``sizes`` needs at least two entries, each in 1 ..= 2**24, with at most 2**28
    parameters in all (ConfigError otherwise, negative entries included).

    Hyperparameters given as Python floats are rounded to binary32 (to nearest even), then
    checked (ConfigError naming the parameter, the value and the accepted range): ``lr`` and
    ``eps`` finite, positive and normal as binary32 (2**-126 ≈ 1.18e-38 up to ≈ 3.40e38; so
    ``lr=1e40``, which rounds to inf, and ``eps=1e-40``, a subnormal, are refused), ``beta1``
    and ``beta2`` in [0, 1) (0.999999999 rounds to 1.0 and is refused).

    >>> t = Trainer(seed=1, sizes=[6, 10, 4], lr=0.01)
    >>> t.epoch
    0
    """

    def __new__(
        cls,
        seed: int = 1,
        *,
        sizes: list[int] = ...,
        lr: float = 0.01,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
    ) -> Trainer: ...
    def step(self, x: npt.ArrayLike, y: int | np.integer[Any]) -> float:
        """One Adam step on one sample; returns its cross-entropy loss before the update.

        ``x`` holds the features (1-D) and ``y`` the label, under the rules of ``train_until``.
        Does not count epochs. Raises InputError for a bad sample; the trainer is unchanged.
        """
    def train_until(self, x: npt.ArrayLike, y: npt.ArrayLike, epoch: int) -> None:
        """Whole epochs over (x, y), every sample in order, until ``epoch`` epochs are done.

        This is the seed's ``train_run``: after ``restore`` it continues an interrupted run
        exactly. Nothing happens if the trainer is already at or past ``epoch``. The GIL is
        released while training; Ctrl-C is honoured between chunks of steps.

        ``x`` (samples, features): float32 as is; float64 is rounded to float32 to nearest by
        numpy (``x.astype(np.float32)``); every other dtype is refused. ``y`` (samples,): any
        numpy integer dtype, signed or unsigned, converted exactly; floats, bools and objects
        are refused. Lists and other array-likes go through ``np.asarray`` first, then the same
        rules (so a list of Python floats is float64, one of ints is int64). InputError for
        a refused dtype, a wrong number of dimensions or features, lengths that differ, no
        samples, more than 2**28 feature values, a NaN or infinite feature, a label outside
        0 ..< classes, or an ``epoch`` beyond 64 bits; the trainer is then unchanged.
        """
    def save(self, path: StrOrBytesPath, *, format: Literal["v1", "v2"] = "v2") -> None:
        """Writes the whole training state to ``path``, crash-safely.

        A temporary file in the same directory is written, fsynced and renamed over ``path``,
        then the directory is fsynced: after a crash at any instant ``path`` is the complete old
        file or the complete new one. "v2" (the default) is self-describing and checksummed;
        "v1" is the seed program's layout.
        """
    @classmethod
    def load(cls, path: StrOrBytesPath) -> Trainer:
        """A trainer rebuilt from a checkpoint, every checksum verified.

        A v2 file carries its configuration; a v1 file is read as the seed model. The file is
        read into memory (not mapped), so a program rewriting it meanwhile cannot crash the
        process: the load gives a CheckpointError instead. Only regular files are read (an
        OSError with errno EINVAL for a FIFO, socket or device; IsADirectoryError).
        """
    def restore(self, path: StrOrBytesPath) -> None:
        """Replaces this trainer's whole state with the checkpoint's (v1 or v2).

        A v2 file must hold this trainer's configuration (MismatchError otherwise). On any error
        nothing changes. The file is read as by ``load``.
        """
    def hash(self) -> int:
        """The seed program's state hash (``hstate``) of the weights."""
    def state_hash(self) -> int:
        """64-bit FNV-1a over the whole state: weights, Adam moments, epoch, b1t, b2t."""
    def state_dict(self) -> dict[str, npt.NDArray[np.float32]]:
        """Copies of every tensor (W1 b1 W2 b2 ... mW1 vW1 ...), weights shaped (out, in)."""
    @property
    def epoch(self) -> int:
        """Completed epochs."""
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
        """Adam's lr, beta1, beta2, eps as the binary32 values in use."""

@final
class Checkpoint:
    """An open, validated NXCK v2 checkpoint (from ``nxrs.open``).

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
        """sizes, lr/beta1/beta2/eps (floats and ``*_bits``), math."""
    @property
    def scalars(self) -> dict[str, int]:
        """epoch, b1t_bits, b2t_bits."""
    def tensor_table(self) -> list[dict[str, Any]]:
        """name, dtype, shape, offset, nbytes, crc32c of each tensor, in file order."""
    def keys(self) -> list[str]:
        """Tensor names in file order."""
    def __len__(self) -> int: ...
    def __contains__(self, key: str, /) -> bool: ...
    def __getitem__(self, key: str, /) -> npt.NDArray[np.float32]:
        """A read-only view of the tensor (KeyError for an unknown name)."""
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

def checkpoint_format(path: StrOrBytesPath) -> int:
    """The NXCK format version of a file (1 or 2), from its first 12 bytes."""

def sweep_temp_files(directory: StrOrBytesPath) -> list[Path]:
    """Removes temporary files left by interrupted saves whose writer is gone; returns them."""

def clip(text: str) -> str:
    """``text`` cut as nxrs's error messages cut values read from a file: the first 100
    characters, then the full length."""

def seed_dataset(
    samples: int = 8, features: int = 6, classes: int = 4
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
