"""CheckpointManager: keeps the newest valid checkpoints and never loses data."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import struct
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import nxrs

X, Y = nxrs.seed_dataset()


def tiny(seed: int) -> nxrs.Trainer:
    """A small model, so that saving and validating it costs next to nothing."""
    return nxrs.Trainer(seed=seed, sizes=[2, 3, 2])


def seed_model(epochs: int) -> nxrs.Trainer:
    """The one model a v1 file can hold (v1 has no sizes; it is read as the seed model)."""
    trainer = nxrs.Trainer(seed=1)
    trainer.train_until(X, Y, epochs)
    return trainer


@contextlib.contextmanager
def recorded() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning of the block, recorded instead of raised (this suite makes them errors)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def warned_names(caught: list[warnings.WarningMessage]) -> list[str]:
    """The checkpoint file names the warnings are about, one per warning, sorted."""
    names = []
    for warning in caught:
        assert issubclass(warning.category, nxrs.CorruptCheckpointWarning), warning
        match = re.search(r"[a-z]+-[0-9]{12}\.nxck", str(warning.message))
        assert match is not None, warning.message
        names.append(match.group())
    return sorted(names)


def flip_bit(path: Path, offset: int, bit: int = 0) -> None:
    content = bytearray(path.read_bytes())
    content[offset] ^= 1 << bit
    path.write_bytes(content)


def crc32c(data: bytes) -> int:
    """CRC-32C as docs/FORMAT.md specifies it, bit by bit (independent of nxrs's)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def test_crc32c_helper_gives_the_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def rewrite_math(path: Path, math: bytes) -> None:
    """Gives a v2 file another ``config.math`` of the same length, with a correct header CRC."""
    content = bytearray(path.read_bytes())
    (header_len,) = struct.unpack_from("<I", content, 12)
    header = bytes(content[32 : 32 + header_len])
    changed = header.replace(b'"math":"seed"', b'"math":"' + math + b'"')
    assert changed != header and len(changed) == len(header)
    content[32 : 32 + header_len] = changed
    struct.pack_into("<I", content, 28, crc32c(bytes(content[:28]) + changed))
    path.write_bytes(content)


# ------------------------------------------------------------------ basics (moved from v2 tests)


def test_keeps_the_newest(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path / "ckpts", keep=2)
    t = nxrs.Trainer()
    hashes = {}
    for step in range(1, 6):
        t.train_until(X, Y, step)
        manager.save(t, step)
        hashes[step] = t.state_hash()
    assert [e.step for e in manager.list()] == [4, 5]
    latest = manager.latest()
    assert latest is not None and latest.step == 5
    loaded = manager.load_latest()
    assert loaded is not None and loaded.state_hash() == hashes[5]


def test_skips_a_corrupt_newest_checkpoint(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=3)
    manager.save(tiny(1), 10)
    newest = manager.save(tiny(2), 11)
    flip_bit(newest, -3)
    with pytest.warns(nxrs.CorruptCheckpointWarning, match="step-000000000011"):
        latest = manager.latest()
    assert latest is not None and latest.step == 10


def test_an_empty_directory(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path)
    assert manager.list() == [] and manager.latest() is None and manager.load_latest() is None
    manager.prune()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("keep", "error"),
    # Every refusal is a ConfigError (a ValueError), the type errors included.
    [(0, ValueError), (-1, ValueError), (True, nxrs.ConfigError), (2.0, nxrs.ConfigError),
     ("3", nxrs.ConfigError)],
)  # fmt: skip
def test_keep_must_be_a_positive_int(tmp_path: Path, keep: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="keep"):
        nxrs.CheckpointManager(tmp_path, keep=keep)  # type: ignore[arg-type]


def test_keep_may_be_any_integer_type(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=np.int64(2))  # type: ignore[arg-type]
    assert manager.keep == 2 and type(manager.keep) is int


@pytest.mark.parametrize(
    ("step", "error"),
    [(-1, nxrs.ConfigError), (True, nxrs.ConfigError), (1.0, nxrs.ConfigError),
     ("1", nxrs.ConfigError)],
)  # fmt: skip
def test_step_must_be_a_non_negative_int(
    tmp_path: Path, step: object, error: type[Exception]
) -> None:
    manager = nxrs.CheckpointManager(tmp_path)
    with pytest.raises(error, match="step"):
        manager.path_for(step)  # type: ignore[arg-type]
    with pytest.raises(error, match="step"):
        manager.save(tiny(1), step)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------- what a hostile run of the manager found


def test_junk_with_a_higher_step_does_not_displace_the_saved_file(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=1)
    junk = manager.path_for(9)
    junk.write_bytes(b"junk")
    trainer = tiny(1)
    with pytest.warns(nxrs.CorruptCheckpointWarning, match=junk.name):
        saved = manager.save(trainer, step=1)
    assert sorted(os.listdir(tmp_path)) == [saved.name, junk.name]
    assert junk.read_bytes() == b"junk"
    with pytest.warns(nxrs.CorruptCheckpointWarning, match=junk.name):
        loaded = manager.load_latest()
    assert loaded is not None and loaded.state_hash() == trainer.state_hash()


def test_resuming_past_a_corrupt_newest_keeps_the_resumed_run(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=1)
    good = tiny(2)
    manager.save(good, step=2)
    # Step 5 written but not pruned after (say, copied in by hand), then damaged on disk.
    corrupt = manager.path_for(5)
    tiny(5).save(corrupt)
    flip_bit(corrupt, 100)
    with pytest.warns(nxrs.CorruptCheckpointWarning, match=corrupt.name):
        resumed = manager.load_latest()
    assert resumed is not None and resumed.state_hash() == good.state_hash()
    resumed.train_until(*nxrs.seed_dataset(features=2, classes=2), epoch=1)
    with pytest.warns(nxrs.CorruptCheckpointWarning, match=corrupt.name):
        saved = manager.save(resumed, step=3)
    # Step 2 goes: step 3 is a newer valid checkpoint. The corrupt step 5 is left for a human.
    assert [e.step for e in manager.list()] == [3, 5]
    with pytest.warns(nxrs.CorruptCheckpointWarning, match=corrupt.name):
        assert manager.latest() == nxrs.CheckpointEntry(3, saved)


def test_junk_files_never_displace_valid_checkpoints(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=3)
    for step in (1, 2, 3):
        manager.save(tiny(step), step)
    junk = {manager.path_for(step): b"junk %d" % step for step in (10, 11, 12, 13)}
    for path, content in junk.items():
        path.write_bytes(content)
    with recorded() as caught:
        manager.save(tiny(4), 4)
    assert warned_names(caught) == sorted(path.name for path in junk)
    assert [e.step for e in manager.list()] == [2, 3, 4, 10, 11, 12, 13]
    assert all(path.read_bytes() == content for path, content in junk.items())


def test_invalid_files_are_never_deleted(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=1)
    truncated = manager.save(tiny(1), 1)
    manager.path_for(0).write_bytes(b"junk")
    truncated.write_bytes(truncated.read_bytes()[:-1])
    left = {path: path.read_bytes() for path in (manager.path_for(0), truncated)}
    for step in (2, 3, 4):
        with recorded() as caught:
            manager.save(tiny(step), step)
        assert warned_names(caught) == sorted(path.name for path in left)
    assert [e.step for e in manager.list()] == [0, 1, 4]
    assert all(path.read_bytes() == content for path, content in left.items())


def test_warnings_point_at_the_caller(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=1)
    manager.path_for(9).write_bytes(b"junk")
    with recorded() as caught:
        manager.save(tiny(1), 1)
        manager.prune()
        manager.latest()
        manager.load_latest()
    assert len(caught) == 4 and {w.filename for w in caught} == {__file__}


def test_saving_a_lower_step_keeps_the_higher_valid_ones(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=1)
    manager.save(tiny(5), 5)
    lower = manager.save(tiny(3), 3)
    assert [e.step for e in manager.list()] == [3, 5]
    assert manager.latest() == nxrs.CheckpointEntry(5, manager.path_for(5))
    manager.save(tiny(4), 4)
    assert [e.step for e in manager.list()] == [4, 5] and not lower.exists()


def write_v2(path: Path) -> None:
    tiny(7).save(path)


def write_v1(path: Path) -> None:
    seed_model(1).save(path, format="v1")


def write_v1_of_another_model(path: Path) -> None:
    """A v1 file in the seed's layout of another model's state (nxrs refuses to write one: it
    would load as the seed model). Only the seed model reads v1: LengthError."""
    trainer = tiny(7)
    tensors = list(trainer.state_dict().values())
    powers = [int(np.float32(p).view(np.uint32)) for p in (trainer.b1t, trainer.b2t)]
    path.write_bytes(
        b"NXCK"
        + struct.pack("<II", len(tensors), 3)
        + struct.pack("<qqq", trainer.epoch, *powers)
        + b"".join(t.astype("<f4").tobytes() for t in tensors)
    )


def write_truncated(path: Path) -> None:
    tiny(7).save(path)
    path.write_bytes(path.read_bytes()[:-1])


def write_bit_flip(path: Path) -> None:
    tiny(7).save(path)
    flip_bit(path, os.path.getsize(path) - 1, 7)


def write_version_3(path: Path) -> None:
    tiny(7).save(path)
    content = bytearray(path.read_bytes())
    struct.pack_into("<I", content, 8, 3)
    path.write_bytes(content)


def write_unknown_math(path: Path) -> None:
    tiny(7).save(path)
    rewrite_math(path, b"zzzz")
    # The crafted file is refused for its math, not for a checksum the helper got wrong.
    with pytest.raises(nxrs.NxrsError, match='math "zzzz"'):
        nxrs.open(path)


KINDS = [
    pytest.param(write_v2, True, id="v2"),
    pytest.param(write_v1, True, id="v1"),
    pytest.param(write_v1_of_another_model, False, id="v1-other-model"),
    pytest.param(write_truncated, False, id="truncated"),
    pytest.param(write_bit_flip, False, id="bit-flip"),
    pytest.param(write_version_3, False, id="version-3"),
    pytest.param(lambda path: path.write_bytes(b""), False, id="empty"),
    pytest.param(lambda path: path.write_bytes(b"junk"), False, id="junk"),
    pytest.param(write_unknown_math, False, id="unknown-math"),
]


@pytest.mark.parametrize(("write", "valid"), KINDS)
def test_latest_load_latest_and_pruning_agree_on_every_kind_of_file(
    tmp_path: Path, write: Callable[[Path], None], valid: bool
) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=1)
    older = tiny(1)
    manager.save(older, 1)
    newest = manager.path_for(2)
    write(newest)
    expected = 2 if valid else 1
    expected_hash = nxrs.Trainer.load(newest).state_hash() if valid else older.state_hash()
    expected_warnings = [] if valid else [newest.name]

    with recorded() as caught:
        latest = manager.latest()
    assert latest == nxrs.CheckpointEntry(expected, manager.path_for(expected))
    assert warned_names(caught) == expected_warnings
    with recorded() as caught:
        loaded = manager.load_latest()
    assert loaded is not None and loaded.state_hash() == expected_hash
    assert warned_names(caught) == expected_warnings
    with recorded() as caught:
        manager.prune()
    assert warned_names(caught) == expected_warnings
    # Valid, the newer file counts and displaces step 1 (keep=1); invalid, it is left alone.
    assert [e.step for e in manager.list()] == ([2] if valid else [1, 2])


@pytest.mark.parametrize(
    "name",
    [
        "step-\u0669.nxck",  # ARABIC-INDIC DIGIT NINE, which int() reads as 9
        "step-" + "\u0660" * 11 + "\u0669.nxck",
        "step-\uff19.nxck",  # FULLWIDTH DIGIT NINE
        "step-9.nxck",
        "step-0000000000009.nxck",
        "step-000000000009.nxck.bak",
        "other-000000000009.nxck",
    ],
)
def test_only_the_names_path_for_gives_are_checkpoints(tmp_path: Path, name: str) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=1)
    stray = tmp_path / name
    tiny(9).save(stray)
    content = stray.read_bytes()
    manager.save(tiny(1), 1)
    manager.save(tiny(2), 2)
    assert [e.step for e in manager.list()] == [2]
    assert manager.latest() == nxrs.CheckpointEntry(2, manager.path_for(2))
    assert stray.read_bytes() == content


def test_directories_and_symlinks_named_like_checkpoints_are_left_alone(tmp_path: Path) -> None:
    directory = tmp_path / "ckpts"
    manager = nxrs.CheckpointManager(directory, keep=1)
    manager.path_for(9).mkdir()
    (manager.path_for(9) / "inside").write_bytes(b"data")
    target = tmp_path / "elsewhere.nxck"
    tiny(8).save(target)
    manager.path_for(8).symlink_to(target)
    manager.save(tiny(1), 1)
    manager.save(tiny(2), 2)
    assert [e.step for e in manager.list()] == [2]
    assert manager.latest() == nxrs.CheckpointEntry(2, manager.path_for(2))
    assert (manager.path_for(9) / "inside").read_bytes() == b"data"
    assert manager.path_for(8).is_symlink() and target.is_file()


def test_a_checkpoint_removed_after_listing_is_skipped_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=1)
    trainer = tiny(1)
    saved = manager.save(trainer, 1)
    listed = manager.list
    # As if another process deleted step 5 between this manager's listing and its reading.
    ghost = nxrs.CheckpointEntry(5, manager.path_for(5))
    monkeypatch.setattr(manager, "list", lambda: [*listed(), ghost])
    # No warning (warnings are errors here): a file that is gone is absent, not corrupt.
    assert manager.latest() == nxrs.CheckpointEntry(1, saved)
    loaded = manager.load_latest()
    assert loaded is not None and loaded.state_hash() == trainer.state_hash()
    manager.prune()
    assert saved.exists()


# ------------------------------------------------------------------ property: random histories

STEPS = st.integers(0, 12)
# Steps of the directories and links named like checkpoints: above every step saved, so they are
# always the "newest" by name, and no save ever targets them.
STRAY_STEPS = st.integers(100, 102)


@dataclass
class File:
    """The test's own record of one checkpoint file: what it holds, or that it is damaged."""

    valid: bool
    state_hash: int = 0  # of the trainer saved, when valid
    content: bytes = b""  # the exact bytes, when damaged


class ManagerMachine(RuleBasedStateMachine):
    """Random saves, v1 saves, damage, junk, stray entries and prunes, checked after each."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="nxrs-manager-"))
        self.files: dict[int, File] = {}
        self.strays: set[Path] = set()
        self.manager: nxrs.CheckpointManager | None = None

    @property
    def m(self) -> nxrs.CheckpointManager:
        assert self.manager is not None
        return self.manager

    def teardown(self) -> None:
        shutil.rmtree(self.root)

    @initialize(keep=st.integers(1, 3))
    def open_directory(self, keep: int) -> None:
        self.manager = nxrs.CheckpointManager(self.root / "ckpts", keep=keep)

    def damaged_names(self) -> list[str]:
        return sorted(self.m.path_for(s).name for s, f in self.files.items() if not f.valid)

    def after_pruning(self, saved: int | None) -> None:
        """Checks which valid files pruning deleted, and forgets them."""
        valid = sorted(s for s, f in self.files.items() if f.valid)
        # The rule: the keep newest valid ones stay, and the file just saved, whatever its step.
        expected = set(valid[-self.m.keep :]) | ({saved} if saved is not None else set())
        for step in valid:
            exists = self.m.path_for(step).exists()
            assert exists == (step in expected), (step, valid, saved, self.m.keep)
            if not exists:
                del self.files[step]

    @rule(step=STEPS, seed=st.integers(0, 30))
    def save(self, step: int, seed: int) -> None:
        trainer = tiny(seed)
        self.files[step] = File(valid=True, state_hash=trainer.state_hash())
        with recorded() as caught:
            path = self.m.save(trainer, step)
        # Pruning reads every checkpoint, so it reports every damaged one, once.
        assert warned_names(caught) == self.damaged_names()
        assert nxrs.Trainer.load(path).state_hash() == trainer.state_hash()
        self.after_pruning(saved=step)

    @rule(step=STEPS, epochs=st.integers(0, 2))
    def save_v1(self, step: int, epochs: int) -> None:
        trainer = seed_model(epochs)
        trainer.save(self.m.path_for(step), format="v1")
        # v1 holds no step counter: the loaded trainer is the saved one with steps = 0.
        loaded = nxrs.Trainer.load(self.m.path_for(step))
        assert loaded.hash() == trainer.hash() and loaded.epoch == trainer.epoch
        assert loaded.steps == 0
        self.files[step] = File(valid=True, state_hash=loaded.state_hash())

    @precondition(lambda self: any(f.valid for f in self.files.values()))
    @rule(data=st.data(), how=st.sampled_from(["flip", "truncate", "junk"]))
    def damage(self, data: st.DataObject, how: str) -> None:
        step = data.draw(st.sampled_from(sorted(s for s, f in self.files.items() if f.valid)))
        path = self.m.path_for(step)
        content = bytearray(path.read_bytes())
        if how == "flip":
            # v1 has no checksums: a flip in its cells is a different valid checkpoint, not
            # damage. A flip in its prelude (magic, tensor and scalar counts) always is.
            is_v2 = content[4:8] == b"\xff\xff\xff\xff"
            offset = data.draw(st.integers(0, len(content) - 1 if is_v2 else 11))
            content[offset] ^= 1 << data.draw(st.integers(0, 7))
        elif how == "truncate":
            del content[data.draw(st.integers(0, len(content) - 1)) :]
        else:
            content = bytearray(b"junk" + data.draw(st.binary(max_size=64)))
        path.write_bytes(content)
        self.files[step] = File(valid=False, content=bytes(content))

    @rule(step=STEPS, tail=st.binary(max_size=64))
    def junk(self, step: int, tail: bytes) -> None:
        if step in self.files and self.files[step].valid:
            return  # damaging a valid file is the damage rule's
        content = b"junk" + tail
        self.m.path_for(step).write_bytes(content)
        self.files[step] = File(valid=False, content=content)

    @rule(step=STRAY_STEPS, kind=st.sampled_from(["directory", "link"]))
    def stray_entry(self, step: int, kind: str) -> None:
        path = self.m.path_for(step)
        if os.path.lexists(path):
            return
        if kind == "directory":
            path.mkdir()
        else:
            target = self.root / f"outside-{step}.nxck"
            tiny(step).save(target)
            path.symlink_to(target)
        self.strays.add(path)

    @rule(name=st.sampled_from(["step-\u0669.nxck", "step-13.nxck", "notes.txt"]))
    def stray_file(self, name: str) -> None:
        path = self.m.directory / name
        tiny(13).save(path)  # valid content under a name that is not a checkpoint's
        self.strays.add(path)

    @rule()
    def prune(self) -> None:
        with recorded() as caught:
            self.m.prune()
        assert warned_names(caught) == self.damaged_names()
        self.after_pruning(saved=None)

    @precondition(lambda self: self.manager is not None)
    @invariant()
    def directory_matches_the_model(self) -> None:
        assert [e.step for e in self.m.list()] == sorted(self.files)
        for step, file in self.files.items():
            if not file.valid:
                assert self.m.path_for(step).read_bytes() == file.content
        assert all(os.path.lexists(path) for path in self.strays)

    @precondition(lambda self: self.manager is not None)
    @invariant()
    def latest_and_load_latest_agree(self) -> None:
        newest = max((s for s, f in self.files.items() if f.valid), default=None)
        skipped = sorted(
            self.m.path_for(s).name
            for s, f in self.files.items()
            if not f.valid and (newest is None or s > newest)
        )
        with recorded() as caught:
            latest = self.m.latest()
        assert warned_names(caught) == skipped
        with recorded() as caught:
            loaded = self.m.load_latest()
        assert warned_names(caught) == skipped
        if newest is None:
            assert latest is None and loaded is None
        else:
            assert latest == nxrs.CheckpointEntry(newest, self.m.path_for(newest))
            assert loaded is not None and loaded.state_hash() == self.files[newest].state_hash


ManagerMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
test_manager_never_loses_data = ManagerMachine.TestCase
