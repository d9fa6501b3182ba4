"""Character-level text for sequence models (TRAINING.md section 15.8): ``nxrs.data.Text``,
``load_text`` and ``load_tinyshakespeare``.

The expected vocabularies and ids are written by hand from the rule (nanoGPT's
``data/shakespeare_char/prepare.py``: the sorted set of characters, the first ``int(n * 0.9)``
for training), or computed by that script's own lines in plain Python. No test uses the
network: downloads are served by a stand-in for ``urllib.request.urlopen``, and any other call
of it fails the test. The real tiny Shakespeare is read from ``$NXRS_DATA``, else from
``shared/data`` beside the repository; where it is absent that test skips, unless the ``CI``
environment variable is set: there it fails.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import urllib.error
import urllib.request
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
import nxrs.data._text as text_module
from nxrs.data import Text, load_text, load_tinyshakespeare

#: The real file's size and SHA-256 (karpathy/char-rnn's data/tinyshakespeare/input.txt).
REAL_SIZE = 1_115_394
REAL_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"

#: Where the real file is outside CI's environment: ``shared/data`` beside the repository.
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

#: A small stand-in for tiny Shakespeare, served by the fake download.
SMALL = b"To be, or not to be:\nthat is the question.\n"
SMALL_SHA256 = hashlib.sha256(SMALL).hexdigest()
URL = "https://example.invalid/tinyshakespeare.txt"


def ids(vocab: str, chars: str) -> list[int]:
    return [vocab.index(c) for c in chars]


# --- the rule ------------------------------------------------------------------------------


def test_vocab_and_split_by_hand() -> None:
    t = Text.from_string("hello world!")
    # 12 characters: int(12 * 0.9) = int(10.8) = 10 for training, 2 for validation. The
    # characters sorted by code point: space (32), ! (33), then d e h l o r w.
    assert t.vocab == " !dehlorw"
    assert t.train.tolist() == [4, 3, 5, 5, 6, 0, 8, 6, 7, 5]  # "hello worl"
    assert t.val.tolist() == [2, 1]  # "d!"
    assert t.train.dtype == np.int64 and t.val.dtype == np.int64


def test_split_truncates_and_takes_val_fraction() -> None:
    text = "abcdefghijklmnopqrstuvwxy"  # 25 characters: int(22.5) = 22 train, 3 validation
    t = Text.from_string(text)
    assert (len(t.train), len(t.val)) == (22, 3)
    assert t.decode(t.val) == "wxy"
    # val_fraction 0.25 of 10: int(10 * 0.75) = 7 train, 3 validation.
    t = Text.from_string("abcdefghij", val_fraction=0.25)
    assert t.decode(t.train) == "abcdefg" and t.decode(t.val) == "hij"


def test_vocab_counts_validation_characters_and_code_point_order() -> None:
    # 'Z' (90) sorts before 'a' (97); 'é' (233) and '😀' (U+1F600) after; 'q' is only in the
    # validation part and is still in the vocabulary, as nanoGPT's (built from the whole text).
    # 11 characters: int(11 * 0.8) = int(8.8) = 8 for training, 3 for validation.
    text = "aZé😀aZé😀aZq"
    t = Text.from_string(text, val_fraction=0.2)
    assert t.vocab == "Zaqé😀"
    assert t.train.tolist() == ids(t.vocab, "aZé😀aZé😀")
    assert t.val.tolist() == ids(t.vocab, "aZq")


def test_round_trip_keeps_every_character() -> None:
    text = "line one\r\nline two\ttab, ünïcödé, 😀 and a lone\x00 NUL\n" * 3
    t = Text.from_string(text)
    assert t.decode(np.concatenate([t.train, t.val])) == text
    assert t.decode(t.encode(text)) == text
    assert t.encode(text).tolist() == ids(t.vocab, text)
    assert t.encode("").dtype == np.int64 and t.encode("").size == 0
    assert t.decode([]) == ""
    assert t.decode(np.array([3], dtype=np.uint8)) == t.vocab[3]


def test_text_is_frozen_and_its_arrays_read_only() -> None:
    t = Text.from_string("hello world!")
    with pytest.raises(FrozenInstanceError):
        t.vocab = "x"  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        t.train[0] = 1


def test_text_constructed_directly_is_checked() -> None:
    t = Text("abc", [0, 1, 2, 2], np.array([1, 0], dtype=np.int32))  # type: ignore[arg-type]
    assert t.train.dtype == np.int64 and t.val.tolist() == [1, 0]
    with pytest.raises(nxrs.InputError, match="code point order"):
        Text("ba", np.zeros(2, np.int64), np.zeros(2, np.int64))
    with pytest.raises(nxrs.InputError, match="code point order"):
        Text("aab", np.zeros(2, np.int64), np.zeros(2, np.int64))
    with pytest.raises(nxrs.InputError, match="non-empty str"):
        Text("", np.zeros(0, np.int64), np.zeros(0, np.int64))
    with pytest.raises(nxrs.InputError, match=r"train\[1\] is 3, not an id"):
        Text("abc", np.array([0, 3]), np.zeros(2, np.int64))


# --- errors ----------------------------------------------------------------------------------


def test_unknown_character_is_named_with_its_position() -> None:
    t = Text.from_string("abc" * 4)
    with pytest.raises(nxrs.InputError, match=r"character 'z' at position 3 of the text"):
        t.encode("abcza")
    with pytest.raises(nxrs.InputError, match=r"character '\\n' at position 0"):
        t.encode("\nab")
    with pytest.raises(nxrs.InputError, match="takes a str"):
        t.encode(b"abc")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([0, 3], r"ids\[1\] is 3, not an id of the vocabulary \(0 \.\. 2\)"),
        ([1, -1], r"ids\[1\] is -1"),
        (np.array([0.0, 1.0]), "integer ids, got dtype float64"),
        ([[0, 1]], r"1-D array of ids, got shape \(1, 2\)"),
        (5, r"got shape \(\)"),
    ],
)
def test_bad_ids_are_named(bad: Any, message: str) -> None:
    with pytest.raises(nxrs.InputError, match=message):
        Text.from_string("abc" * 4).decode(bad)


def test_not_utf8_names_the_byte_offset_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("café au lait, ".encode() + b"na\xefve\n" * 3)
    # "café au lait, " is 15 bytes (é is two), "na" two more: the bad byte is at offset 17.
    with pytest.raises(nxrs.InputError, match=r"latin1\.txt: not UTF-8 text: byte offset 17 "):
        load_text(path)
    path.write_bytes(b"abcdefghij\xe2\x82")  # a sequence cut short at the end
    with pytest.raises(nxrs.InputError, match="byte offset 10 "):
        load_text(path)


def test_empty_and_too_short_texts(tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    with pytest.raises(nxrs.InputError, match=r"empty\.txt is empty"):
        load_text(path)
    path = tmp_path / "short.txt"
    path.write_text("abcdefghijk", encoding="utf-8")  # 11: int(9.9) = 9 and 2: enough
    assert len(load_text(path).val) == 2
    path.write_text("abcdefghij", encoding="utf-8")  # 10: int(9.0) = 9 and 1
    with pytest.raises(nxrs.InputError, match=r"short\.txt has 10 characters: .* 9 for training"):
        load_text(path)
    # In binary64 1 - 0.9 is 0.09999999999999998, and 10 times that truncates to 0.
    with pytest.raises(nxrs.InputError, match="0 for training and 10 for validation"):
        load_text(path, val_fraction=0.9)
    with pytest.raises(nxrs.InputError, match="the text has 3 characters"):
        Text.from_string("abc")


@pytest.mark.parametrize("fraction", [0, 1, 0.0, 1.0, -0.1, 1.5, float("nan"), True, "0.1", None])
def test_val_fraction_outside_zero_one_is_a_config_error(tmp_path: Path, fraction: Any) -> None:
    with pytest.raises(nxrs.ConfigError, match="val_fraction"):
        Text.from_string("abcdefghijklmnopqrstuvwxyz", val_fraction=fraction)
    # Checked before the file is read: a missing file is not what is reported.
    with pytest.raises(nxrs.ConfigError, match="val_fraction"):
        load_text(tmp_path / "missing.txt", val_fraction=fraction)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(nxrs.InputError, match=r"missing\.txt: cannot read the text"):
        load_text(tmp_path / "missing.txt")
    with pytest.raises(nxrs.InputError, match="cannot read the text"):
        load_text(tmp_path)  # a directory


def test_load_text_reads_the_file_by_the_rule(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes("ab\r\nba\r\nçç\n".encode())  # 11 characters, \r kept: 9 and 2
    t = load_text(str(path))
    assert t.vocab == "\n\rabç"
    assert t.train.tolist() == ids(t.vocab, "ab\r\nba\r\nç")
    assert t.val.tolist() == ids(t.vocab, "ç\n")


# --- tiny Shakespeare: the file, its cache, the download --------------------------------------


class FakeUrlopen:
    """Stands in for ``urllib.request.urlopen``: serves ``body`` (or raises ``error``) and
    records the URLs asked for."""

    def __init__(self, body: bytes = b"", error: Exception | None = None) -> None:
        self.body, self.error, self.urls = body, error, []

    def __call__(self, url: str, timeout: float | None = None) -> Any:
        self.urls.append(url)
        if self.error is not None:
            raise self.error
        return _Response(self.body)


class _Response:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def __enter__(self) -> _Response:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def read(self) -> bytes:
        return self.body


def no_network(url: str, timeout: float | None = None) -> Any:
    raise AssertionError(f"a test asked the network for {url}")


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """``SMALL`` in place of tiny Shakespeare, the environment's directories cleared (the
    cache under ``tmp_path/xdg``), and no network; returns ``tmp_path``."""
    source = text_module._Download("tinyshakespeare.txt", URL, len(SMALL), SMALL_SHA256)
    monkeypatch.setattr(text_module, "_TINYSHAKESPEARE", source)
    monkeypatch.delenv("NXRS_DATA", raising=False)
    monkeypatch.delenv("NXRS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    return tmp_path


def expected_small() -> Text:
    return Text.from_string(SMALL.decode())


def same(a: Text, b: Text) -> bool:
    return (
        a.vocab == b.vocab
        and a.train.tolist() == b.train.tolist()
        and a.val.tolist() == (b.val.tolist())
    )


def test_a_file_in_place_is_read_without_the_network(small: Path) -> None:
    home = small / "home"
    home.mkdir()
    (home / "tinyshakespeare.txt").write_bytes(SMALL)
    assert same(load_tinyshakespeare(data_home=home), expected_small())
    assert same(load_tinyshakespeare(data_home=str(home)), expected_small())


def test_downloads_once_then_reads_the_cache(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeUrlopen(SMALL)
    monkeypatch.setattr(urllib.request, "urlopen", fake)
    first = load_tinyshakespeare()
    cache = small / "xdg" / "nxrs" / "data"
    assert fake.urls == [URL]
    assert os.listdir(cache) == ["tinyshakespeare.txt"]  # no temporary file left
    assert (cache / "tinyshakespeare.txt").read_bytes() == SMALL
    assert same(first, expected_small())
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    assert same(load_tinyshakespeare(), expected_small())  # from the cache
    assert fake.urls == [URL]


def test_a_wrong_download_names_both_hashes_and_leaves_no_file(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = SMALL.replace(b"question", b"answer!!")
    monkeypatch.setattr(urllib.request, "urlopen", FakeUrlopen(wrong))
    home = small / "home"
    with pytest.raises(nxrs.InputError) as err:
        load_tinyshakespeare(data_home=home)
    message = str(err.value)
    assert hashlib.sha256(wrong).hexdigest() in message and SMALL_SHA256 in message
    assert "nothing was saved" in message and str(home / "tinyshakespeare.txt") in message
    assert not home.exists() or os.listdir(home) == []
    home.mkdir(exist_ok=True)
    with pytest.raises(nxrs.InputError):
        load_tinyshakespeare(data_home=home)
    assert os.listdir(home) == []


def test_a_failed_download_says_where_to_put_the_file(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeUrlopen(error=urllib.error.URLError("no route to host"))
    monkeypatch.setattr(urllib.request, "urlopen", fake)
    home = small / "home"
    with pytest.raises(nxrs.InputError) as err:
        load_tinyshakespeare(data_home=home)
    message = str(err.value)
    assert f"could not download {URL}" in message and "no route to host" in message
    assert f"save it as {home / 'tinyshakespeare.txt'}" in message
    assert SMALL_SHA256 in message and "NXRS_DATA" in message
    monkeypatch.setattr(urllib.request, "urlopen", FakeUrlopen(error=TimeoutError("timed out")))
    with pytest.raises(nxrs.InputError, match="timed out"):
        load_tinyshakespeare(data_home=home)
    cut = FakeUrlopen(error=http.client.IncompleteRead(SMALL[:5], len(SMALL) - 5))
    monkeypatch.setattr(urllib.request, "urlopen", cut)
    with pytest.raises(nxrs.InputError, match=r"IncompleteRead\(5 bytes read, 38 more expected\)"):
        load_tinyshakespeare(data_home=home)
    assert not home.exists()


def test_a_wrong_file_in_place_is_refused_and_kept(small: Path) -> None:
    home = small / "home"
    home.mkdir()
    wrong = SMALL + b"!"
    (home / "tinyshakespeare.txt").write_bytes(wrong)
    with pytest.raises(nxrs.InputError) as err:
        load_tinyshakespeare(data_home=home)
    message = str(err.value)
    assert hashlib.sha256(wrong).hexdigest() in message and SMALL_SHA256 in message
    assert "delete it" in message
    assert (home / "tinyshakespeare.txt").read_bytes() == wrong


def test_data_home_then_nxrs_data_then_the_cache(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A right file where each directory is asked for it, and a wrong one everywhere after: the
    # one read is the first in the order data_home, $NXRS_DATA, the cache directory.
    home, env, xdg, nxrs_cache = (small / n for n in ("home", "env", "xdg", "nxrs-cache"))
    for d in (home, env, xdg / "nxrs" / "data", nxrs_cache / "data"):
        d.mkdir(parents=True)
        (d / "tinyshakespeare.txt").write_bytes(b"not the file")
    (home / "tinyshakespeare.txt").write_bytes(SMALL)
    monkeypatch.setenv("NXRS_DATA", str(env))
    assert same(load_tinyshakespeare(data_home=home), expected_small())
    with pytest.raises(nxrs.InputError, match=re.escape(str(env / "tinyshakespeare.txt"))):
        load_tinyshakespeare()
    (env / "tinyshakespeare.txt").write_bytes(SMALL)
    assert same(load_tinyshakespeare(), expected_small())
    monkeypatch.setenv("NXRS_DATA", "")  # empty: unset
    with pytest.raises(nxrs.InputError, match=re.escape(str(xdg / "nxrs" / "data"))):
        load_tinyshakespeare()
    monkeypatch.setenv("NXRS_CACHE_DIR", str(nxrs_cache))
    with pytest.raises(nxrs.InputError, match=re.escape(str(nxrs_cache / "data"))):
        load_tinyshakespeare()
    (nxrs_cache / "data" / "tinyshakespeare.txt").write_bytes(SMALL)
    assert same(load_tinyshakespeare(), expected_small())


def test_the_downloaded_source_is_char_rnns_file() -> None:
    source = text_module._TINYSHAKESPEARE
    assert source.url == (
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
    )
    assert (source.file, source.size, source.sha256) == (
        "tinyshakespeare.txt",
        REAL_SIZE,
        REAL_SHA256,
    )


# --- the real tiny Shakespeare ----------------------------------------------------------------


@pytest.fixture
def real_dir() -> Path:
    """The directory holding the real file: ``$NXRS_DATA``, else ``shared/data`` beside the
    repository. A skip with the reason when it is not there, a failure on CI."""
    where = Path(os.environ.get("NXRS_DATA") or SHARED_DATA)
    if not (where / "tinyshakespeare.txt").is_file():
        reason = f"tiny Shakespeare is not at {where / 'tinyshakespeare.txt'} (set NXRS_DATA)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real tiny Shakespeare: {reason}")
        pytest.skip(reason)
    return where


def test_the_real_tiny_shakespeare(real_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    t = load_tinyshakespeare(data_home=real_dir)
    assert (len(t.vocab), len(t.train), len(t.val)) == (65, 1_003_854, 111_540)
    # nanoGPT's data/shakespeare_char/prepare.py, line for line, in plain Python.
    data = (real_dir / "tinyshakespeare.txt").read_bytes().decode("utf-8")
    chars = sorted(list(set(data)))
    stoi = {ch: i for i, ch in enumerate(chars)}
    n = len(data)
    assert n == REAL_SIZE  # ASCII: one byte per character
    assert t.vocab == "".join(chars)
    assert t.train.tolist() == [stoi[c] for c in data[: int(n * 0.9)]]
    assert t.val.tolist() == [stoi[c] for c in data[int(n * 0.9) :]]
    assert t.decode(t.train[:14]) == "First Citizen:"
