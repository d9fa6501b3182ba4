"""Type stubs of the compiled extension ``nxrs._nxrs`` (Rust, PyO3)."""

from os import PathLike
from typing import Literal, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "BadMagicError",
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
    "f32_binary",
    "f32_compare",
    "f32_from_i64",
    "f32_to_i32",
    "f32_to_i64",
    "f32_unary",
    "seed_dataset",
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
    Hyperparameters given as Python floats are rounded to binary32 (to nearest even).

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
    def step(self, x: npt.NDArray[np.float32], y: int) -> float:
        """One Adam step on one sample (float32 features, integer label).

        Returns the sample's cross-entropy loss before the update. Does not count epochs.
        Raises InputError for a wrong feature count or a label outside the classes.
        """
    def train_until(self, x: npt.NDArray[np.float32], y: npt.NDArray[np.int64], epoch: int) -> None:
        """Whole epochs over (x, y), every sample in order, until ``epoch`` epochs are done.

        This is the seed's ``train_run``: after ``restore`` it continues an interrupted run
        exactly. Nothing happens if the trainer is already at or past ``epoch``. The GIL is
        released while training; Ctrl-C is honoured between chunks of steps.
        """
    def save(self, path: str | PathLike[str], *, format: Literal["v1"] = "v1") -> None:
        """Writes the whole training state to ``path`` ("v1": the seed's NXCK layout)."""
    @classmethod
    def load(cls, path: str | PathLike[str]) -> Trainer:
        """A trainer restored from a checkpoint (a v1 file is read as the seed model)."""
    def restore(self, path: str | PathLike[str]) -> None:
        """Replaces this trainer's whole state with the checkpoint's; on error nothing changes."""
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

def seed_dataset(
    samples: int = 8, features: int = 6, classes: int = 4
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """The seed's synthetic dataset: x float32 (samples, features), y int64 (samples,)."""

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
