"""Character-level text for sequence models (TRAINING.md section 15.8): ``Text``, a text's
vocabulary and its training and validation ids; ``load_text`` reads one from a UTF-8 file and
``load_tinyshakespeare`` gets tiny Shakespeare, nanoGPT's character-level corpus, checked by its
SHA-256 and downloaded at most once.

**The rule, nanoGPT's** (``data/shakespeare_char/prepare.py``): the vocabulary is the sorted
set of the text's characters (by code point), id ``i`` being ``vocab[i]``; with ``n`` the
number of characters, the first ``int(n * (1 - val_fraction))`` characters (in binary64, then
truncated: ``int(n * 0.9)`` for the default 0.1, as ``1 - 0.1`` is ``0.9`` in binary64) are the
training ids and the rest the validation ids. (Other fractions are binary64's too: ``1 - 0.9``
is ``0.09999999999999998``, so 10 characters give 0 for training.) Characters are the file's
own, every one: UTF-8 decoded strictly, with no newline translation (a ``\\r`` is a character)
and no normalisation.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import ConfigError, InputError
from nxrs._util.cache import cache_root
from nxrs._util.files import write_bytes_atomically

__all__ = ["Text", "load_text", "load_tinyshakespeare"]

I64Array = npt.NDArray[np.int64]

#: The fewest characters each part may have: a training or validation window is at least one
#: input character and the next one, its label.
_MIN_PART = 2

#: The characters of a ``str`` as one code point each: UTF-32 (a lone surrogate included, which
#: a Python string may hold though no UTF-8 file can).
_CODEC, _ERRORS = "utf-32-le", "surrogatepass"


def _codes(text: str) -> npt.NDArray[np.uint32]:
    return np.frombuffer(text.encode(_CODEC, _ERRORS), dtype="<u4")


@dataclass(frozen=True, eq=False)
class Text:
    """A character-level text: its vocabulary ``vocab`` (the sorted distinct characters; id
    ``i`` is ``vocab[i]``) and the int64 ids of its training part ``train`` and validation part
    ``val`` (read-only arrays). ``Text.from_string`` and ``load_text`` make one by the module's
    rule; equality is identity (the arrays have no single truth value).

    >>> t = Text.from_string("hello world!")
    >>> t.vocab
    ' !dehlorw'
    >>> t.train.tolist(), t.val.tolist()
    ([4, 3, 5, 5, 6, 0, 8, 6, 7, 5], [2, 1])
    >>> t.decode(t.encode("hold"))
    'hold'

    A sequence model reads ids as tokens (``Embedding(len(t.vocab), ...)``): windows of
    ``context`` ids from ``train``, each labelled by the window one character further on, so a
    part needs at least ``context + 1`` characters, which the training code checks.
    """

    vocab: str
    train: I64Array
    val: I64Array

    def __post_init__(self) -> None:
        if not isinstance(self.vocab, str) or not self.vocab:
            raise InputError(f"a Text's vocab must be a non-empty str, not {self.vocab!r:.60}")
        codes = _codes(self.vocab)
        if not (codes[1:] > codes[:-1]).all():
            raise InputError(
                "a Text's vocab must be distinct characters in code point order "
                f"(''.join(sorted(set(text)))), not {self.vocab!r:.60}"
            )
        for name in ("train", "val"):
            ids = self._ids(getattr(self, name), name)
            ids.flags.writeable = False  # the Text is frozen, its arrays with it
            object.__setattr__(self, name, ids)

    @classmethod
    def from_string(cls, text: str, val_fraction: float = 0.1) -> Text:
        """The ``Text`` of ``text`` by the module's rule: its vocabulary, its first
        ``int(len(text) * (1 - val_fraction))`` characters as ``train``, the rest as ``val``.

        ``val_fraction`` is a real number strictly between 0 and 1 (``ConfigError``
        otherwise); an empty text, or one with a part shorter than 2 characters, is an
        ``InputError``.

        >>> t = Text.from_string("abcabcabca", val_fraction=0.2)
        >>> t.vocab, t.decode(t.train), t.decode(t.val)
        ('abc', 'abcabcab', 'ca')
        """
        return _split(text, val_fraction, "the text")

    def encode(self, text: str) -> I64Array:
        """The ids of ``text``'s characters (int64, one per character); a character outside
        the vocabulary is an ``InputError`` naming it and its position in ``text``.

        >>> Text.from_string("abc" * 4).encode("cab").tolist()
        [2, 0, 1]
        """
        if not isinstance(text, str):
            raise InputError(f"encode takes a str, not {type(text).__name__}")
        vocab, codes = _codes(self.vocab), _codes(text)
        ids = np.searchsorted(vocab, codes)
        known = vocab[np.minimum(ids, len(vocab) - 1)] == codes
        if not known.all():
            at = int(np.argmin(known))
            raise InputError(
                f"character {text[at]!r} at position {at} of the text is not in the vocabulary "
                f"({len(self.vocab)} characters)"
            )
        return ids.astype(np.int64)

    def decode(self, ids: npt.ArrayLike) -> str:
        """The characters of ``ids`` (a 1-D sequence or array of integers) as a string; an
        id outside ``0 .. len(vocab) - 1`` is an ``InputError`` naming it and its position.

        >>> Text.from_string("abc" * 4).decode([2, 0, 1])
        'cab'
        """
        return _codes(self.vocab)[self._ids(ids, "ids")].tobytes().decode(_CODEC, _ERRORS)

    def _ids(self, values: Any, what: str) -> I64Array:
        """``values`` as a 1-D int64 array of ids of this vocabulary; an ``InputError`` naming
        ``what`` and the first bad id otherwise."""
        try:
            array = np.asarray(values)
        except (TypeError, ValueError) as err:
            raise InputError(f"{what} must be a 1-D array of integer ids: {err}") from err
        if array.ndim != 1:
            raise InputError(f"{what} must be a 1-D array of ids, got shape {array.shape}")
        if array.size == 0:
            return np.zeros(0, dtype=np.int64)
        if array.dtype.kind not in "iu":
            raise InputError(f"{what} must be integer ids, got dtype {array.dtype}")
        bad = (array < 0) | (array >= len(self.vocab))
        if bad.any():
            at = int(np.argmax(bad))
            raise InputError(
                f"{what}[{at}] is {int(array[at])}, not an id of the vocabulary "
                f"(0 .. {len(self.vocab) - 1})"
            )
        return np.ascontiguousarray(array, dtype=np.int64)


def _split(text: str, val_fraction: float, name: str) -> Text:
    """``Text.from_string``'s ``Text`` of ``text``, whose errors name ``name``."""
    fraction = _val_fraction(val_fraction)
    if not isinstance(text, str):
        raise InputError(f"{name} must be a str, not {type(text).__name__}")
    if not text:
        raise InputError(f"{name} is empty: there are no characters to train on")
    n = len(text)
    n_train = int(n * (1.0 - fraction))
    if min(n_train, n - n_train) < _MIN_PART:
        raise InputError(
            f"{name} has {n:,} characters: with val_fraction {val_fraction} that is "
            f"{n_train:,} for training and {n - n_train:,} for validation, and each part "
            f"needs at least {_MIN_PART} (an input character and its next as the label)"
        )
    vocab = "".join(sorted(set(text)))
    ids = np.searchsorted(_codes(vocab), _codes(text)).astype(np.int64)
    return Text(vocab, ids[:n_train], ids[n_train:])


def _val_fraction(value: object) -> float:
    """``value`` as a float strictly between 0 and 1; ``ConfigError`` otherwise (a setting,
    not a property of the data)."""
    real = (int, float, np.integer, np.floating)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, real):
        raise ConfigError(f"val_fraction must be a number between 0 and 1, not {value!r:.60}")
    fraction = float(value)
    if not 0.0 < fraction < 1.0:  # NaN included
        raise ConfigError(f"val_fraction = {value!r} must be strictly between 0 and 1")
    return fraction


def load_text(path: str | os.PathLike[str], val_fraction: float = 0.1) -> Text:
    """The ``Text`` of the UTF-8 file ``path`` (``Text.from_string``'s rule: nanoGPT's split,
    the first ``int(n * 0.9)`` characters training by default).

    An ``InputError`` names the file for: a file that cannot be read; bytes that are not UTF-8
    (with the offset of the first bad byte); an empty text, or one whose training or validation
    part would be shorter than 2 characters. ``val_fraction`` outside ``(0, 1)`` is a
    ``ConfigError``, checked before the file is read. Training on a part also needs it to be at
    least ``context + 1`` characters, which the training code checks.
    """
    _val_fraction(val_fraction)
    file = Path(path)
    try:
        data = file.read_bytes()
    except OSError as err:
        raise InputError(f"{file}: cannot read the text: {err.strerror or err}") from err
    return _text_of(data, val_fraction, str(file))


def _text_of(data: bytes, val_fraction: float, name: str) -> Text:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            f"{name}: not UTF-8 text: byte offset {err.start} ({data[err.start : err.end]!r}): "
            f"{err.reason}"
        ) from None
    return _split(text, val_fraction, name)


class _Download(NamedTuple):
    """A file a loader downloads once: its name in the data directory, its URL, and what it
    must be (its size for messages, its SHA-256 for the check)."""

    file: str
    url: str
    size: int
    sha256: str


#: Tiny Shakespeare: ``data/tinyshakespeare/input.txt`` of karpathy/char-rnn, the text nanoGPT's
#: ``shakespeare_char`` downloads.
_TINYSHAKESPEARE = _Download(
    file="tinyshakespeare.txt",
    url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
    size=1_115_394,
    sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
)

#: How long a download may wait for the server, in seconds.
_TIMEOUT = 60.0

#: One download at a time in this process: two threads would write the same temporary file.
_DOWNLOAD_LOCK = threading.Lock()


def _data_dir(data_home: str | os.PathLike[str] | None = None) -> Path:
    """Where the downloaded data sets are: ``data_home``, else ``$NXRS_DATA``, else the cache
    directory's ``data`` (``$NXRS_CACHE_DIR/data``, else ``$XDG_CACHE_HOME/nxrs/data``, else
    ``~/.cache/nxrs/data``)."""
    if data_home is not None:
        return Path(data_home)
    return Path(os.environ.get("NXRS_DATA") or cache_root() / "data")


def load_tinyshakespeare(data_home: str | os.PathLike[str] | None = None) -> Text:
    """Tiny Shakespeare (karpathy/char-rnn's ``data/tinyshakespeare/input.txt``, 1,115,394
    bytes of ASCII), nanoGPT's ``shakespeare_char`` data: 65 characters, 1,003,854 training and
    111,540 validation ids (``Text.from_string``'s rule, ``val_fraction`` 0.1).

    The file is ``tinyshakespeare.txt`` in ``data_home``, else in ``$NXRS_DATA``, else in the
    cache directory's ``data`` (``$NXRS_CACHE_DIR``, ``$XDG_CACHE_HOME/nxrs`` or
    ``~/.cache/nxrs``). When it is there with the right SHA-256 it is read, with no network;
    when it is absent it is downloaded once into that directory (the whole file, checked
    against the SHA-256 before anything is written, then written to a temporary name and
    renamed). An ``InputError`` for a download that fails or gives other bytes (naming both
    SHA-256s; nothing is written) says where to put the file by hand; a file there with another
    SHA-256 is an ``InputError`` too, never replaced.
    """
    source = _TINYSHAKESPEARE
    path = _data_dir(data_home) / source.file
    with _DOWNLOAD_LOCK:
        if not path.exists():
            _download(source, path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read tiny Shakespeare: {err.strerror or err}") from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != source.sha256:
        raise InputError(
            f"{path} is not tiny Shakespeare: its SHA-256 is {digest}, not {source.sha256} "
            f"({len(data):,} bytes, not {source.size:,}); delete it to download the file again"
        )
    return _text_of(data, 0.1, str(path))


def _download(source: _Download, path: Path) -> None:
    """``source`` into ``path``: fetched whole, checked, then written atomically."""
    import http.client  # only here: most programs never download
    import urllib.request

    by_hand = (
        f"download {source.url} ({source.size:,} bytes, SHA-256 {source.sha256}) and save it "
        f"as {path}, or pass data_home (or set NXRS_DATA) to a directory that holds it as "
        f"{source.file}"
    )
    try:
        with urllib.request.urlopen(source.url, timeout=_TIMEOUT) as response:
            data = response.read()
    # URLError, HTTPError, timeouts and resets are OSErrors; a body cut short (IncompleteRead)
    # is an HTTPException.
    except (OSError, http.client.HTTPException) as err:
        raise InputError(f"could not download {source.url}: {err}; {by_hand}") from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != source.sha256:
        raise InputError(
            f"the download of {source.url} gave {len(data):,} bytes with SHA-256 {digest}, not "
            f"the expected {source.sha256}; nothing was saved; {by_hand}"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomically(path, data)
    except OSError as err:
        raise InputError(f"could not save {path}: {err.strerror or err}; {by_hand}") from err
