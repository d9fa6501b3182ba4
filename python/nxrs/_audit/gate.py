"""The gate: the seed program's checkpoint/resume proof (T1-T4), run through nxrs.

It prints a report like the seed's, with the same hash numbers, and goes beyond the seed where
the seed is weak: every round-trip and resume check also compares every tensor (Adam moments
included), the epoch and the bias-correction powers, which the seed's hash cannot see (through
v2, the full-state hash, step counter included; v1 holds no step counter), and the checkpoint
goes to a fresh temporary directory instead of a fixed path.
"""

from __future__ import annotations

import json
import struct
import tempfile
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TextIO

from nxrs._nxrs import (
    CheckpointError,
    ChecksumError,
    LengthError,
    NxrsError,
    seed_dataset,
)
from nxrs._trainer import Trainer

EPOCHS = 800
SPLIT = 400
SEED = 1
FRESH_SEED = 99  # the seed's fresh handle: a different init proves the load overwrites it


def expected() -> dict[str, object]:
    """The seed's hashes from the independent reference, shipped with the package."""
    text = resources.files("nxrs").joinpath("golden.json").read_text(encoding="utf-8")
    data: dict[str, object] = json.loads(text)
    return data


@dataclass
class Report:
    """Collects check results and prints them the way the seed does."""

    out: TextIO
    passes: int = 0
    total: int = 0
    failures: list[str] = field(default_factory=list)

    def check(self, ok: bool, line: str) -> None:
        self.total += 1
        self.passes += ok
        if not ok:
            self.failures.append(line)
        self.out.write(f" [{'PASS' if ok else 'FAIL'}] {line}\n")


def run_gate(out: TextIO, workdir: Path | None = None) -> bool:
    """Runs T1-T4 and prints the report and verdict; returns True when every check passed."""
    golden = expected()
    seed_hashes: dict[str, int] = golden["seed_hash"]  # type: ignore[assignment]
    state_hashes: dict[str, int] = golden["state_hash"]  # type: ignore[assignment]
    x, y = seed_dataset()
    report = Report(out)
    out.write(
        "=== nx_f32_train_ckpt_gate: checkpoint + EXACT resume of full training state "
        "(cloud spot-safe) ===\n"
    )

    # (A) UNINTERRUPTED: 800 epochs from the seed init.
    a = Trainer(seed=SEED)
    a.train_until(x, y, EPOCHS)
    h_a = a.hash()
    report.check(
        h_a == seed_hashes[str(EPOCHS)] and a.state_hash() == state_hashes[str(EPOCHS)],
        f"T1 UNINTERRUPTED: trained {EPOCHS} epochs, final state hash={h_a} "
        f"(reference {seed_hashes[str(EPOCHS)]}; full-state hash={a.state_hash():#018x})",
    )

    # (B) CHECKPOINTED: 400 epochs -> save all state -> fresh handle loads -> 400 more.
    with _directory(workdir) as d:
        path = Path(d) / "nx_train.ckpt"
        b = Trainer(seed=SEED)
        b.train_until(x, y, SPLIT)
        b.save(path, format="v1")
        h_mid, full_mid = b.hash(), b.state_hash()
        size = path.stat().st_size
        c = Trainer(seed=FRESH_SEED)
        overwritten = c.state_hash() != full_mid
        c.restore(path)
        report.check(
            overwritten and c.hash() == h_mid and _same_but_steps(c, b),
            f"T2 CKPT ROUNDTRIP: saved {size} bytes; FRESH handle loaded -> state hash == "
            f"pre-save ({h_mid}); every tensor, epoch, b1t, b2t bit-identical (v1 holds no "
            "step counter)",
        )

    # Resume the fresh handle for the remaining epochs.
    c.train_until(x, y, EPOCHS)
    h_c = c.hash()
    report.check(
        h_c == h_a and _same_but_steps(c, a),
        f"T3 RESUME-EQUIVALENCE: {SPLIT}+ckpt+resume-{EPOCHS - SPLIT} final hash={h_c} == "
        f"uninterrupted-{EPOCHS} hash={h_a}; every tensor and scalar but the step counter "
        "equal (bit-identical -> spot preemption is FREE)",
    )

    # T4: the scalars were restored: the epoch counter reached 800 and b1t/b2t match exactly.
    scalars_equal = (c.epoch, _bits(c.b1t), _bits(c.b2t)) == (a.epoch, _bits(a.b1t), _bits(a.b2t))
    report.check(
        c.epoch == EPOCHS and scalars_equal,
        f"T4 SCALARS RESTORED: resumed epoch counter={c.epoch} (Adam bias-correction powers "
        f"b1t={_bits(c.b1t):#010x} b2t={_bits(c.b2t):#010x} also snapshotted -> exact "
        "continuation)",
    )

    # Beyond the seed: the same round trip and resume through NXCK v2 (self-describing,
    # checksummed), and a damaged v2 file refused without touching the trainer.
    with _directory(workdir) as d:
        path = Path(d) / "nx_train.v2.nxck"
        b.save(path)  # v2, the default
        size = path.stat().st_size
        d2 = Trainer.load(path)
        roundtrip = d2.hash() == h_mid and d2.state_hash() == full_mid
        d2.train_until(x, y, EPOCHS)
        report.check(
            roundtrip and d2.hash() == h_a and d2.state_hash() == a.state_hash(),
            f"T5 V2 ROUNDTRIP+RESUME: saved {size} bytes (v2); loaded full-state hash == "
            f"pre-save ({full_mid:#018x}); resumed to {EPOCHS}: hash={d2.hash()}, full-state "
            f"hash {d2.state_hash():#018x} == uninterrupted",
        )
        # restore takes only a file of the trainer's own configuration (seed included).
        refused = _refuses_damage(path, Trainer(seed=SEED))
        report.check(
            refused,
            "T6 CORRUPT V2 REFUSED: a flipped bit in a tensor -> ChecksumError, a truncated "
            "file -> LengthError; the trainer loaded into is unchanged",
        )

    green = report.passes == report.total
    out.write(
        "\n CHECKPOINT/RESUME: full training state (weights + Adam m/v + bias-correction powers"
        " + epoch) snapshots to\n one file and restores EXACTLY -- a preempted spot-instance run"
        " resumes bit-identical to uninterrupted.\n"
    )
    verdict = "GREEN" if green else "RED"
    tail = (
        " -- checkpoint + EXACT resume proven; sovereign training survives preemption"
        if green
        else ""
    )
    out.write(f"NX-F32-TRAIN-CKPT verdict={verdict} passes={report.passes}/{report.total}{tail}\n")
    return green


def _refuses_damage(path: Path, victim: Trainer) -> bool:
    """Whether a bit flip in the last tensor and a truncation of ``path`` are both refused with
    the right exception, leaving ``victim`` as it was."""
    good = path.read_bytes()
    before = victim.state_hash()
    flipped = bytearray(good)
    flipped[-1] ^= 0x10  # the last byte is tensor data (vb2's last cell)
    cases: list[tuple[bytes, type[CheckpointError]]] = [
        (bytes(flipped), ChecksumError),
        (good[: len(good) // 2], LengthError),
    ]
    damaged = path.with_name(path.name + ".damaged")
    for content, expected in cases:
        damaged.write_bytes(content)
        try:
            victim.restore(damaged)
            return False
        except expected:
            pass
        except NxrsError:
            return False
    return victim.state_hash() == before


def _same_but_steps(a: Trainer, b: Trainer) -> bool:
    """Every tensor's bits, epoch, b1t and b2t equal: all a v1 file holds (no step counter)."""
    sa, sb = a.state_dict(), b.state_dict()
    tensors = list(sa) == list(sb) and all(sa[k].tobytes() == sb[k].tobytes() for k in sa)
    scalars = (a.epoch, _bits(a.b1t), _bits(a.b2t)) == (b.epoch, _bits(b.b1t), _bits(b.b2t))
    return tensors and scalars


def _bits(value: float) -> int:
    """The binary32 bit pattern of a value that came out of a float32 (exact)."""
    bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    return bits


def _directory(path: Path | None) -> AbstractContextManager[str | Path]:
    """The given directory, or a fresh temporary one removed afterwards."""
    if path is not None:
        return nullcontext(path)
    return tempfile.TemporaryDirectory(prefix="nxrs-gate-")
