"""``nxrs inspect FILE``: what a checkpoint holds, and whether it is intact."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import numpy as np

from nxrs._nxrs import ChecksumError, Trainer, checkpoint_format, clip, open


def inspect_checkpoint(path: Path, out: TextIO, *, verify: bool = False) -> int:
    """Prints the format, configuration, scalars and tensor table; returns the problem count.

    With ``verify``, every tensor's CRC-32C is computed and each failure is a problem; without
    it, only the header is validated and the tensors' checksum status is "not checked".
    Values from the file are printed clipped (as nxrs's messages clip them), so a hostile
    header cannot flood the terminal. Raises an ``NxrsError`` (or ``OSError``) when the file
    cannot be read as a checkpoint at all.
    """
    version = checkpoint_format(path)
    out.write(f"file     {path} ({path.stat().st_size} bytes)\n")
    if version == 1:
        return _inspect_v1(path, out)
    return _inspect_v2(path, out, verify)


def _inspect_v2(path: Path, out: TextIO, verify: bool) -> int:
    with open(path, verify=False) as ck:
        config, scalars = ck.config, ck.scalars
        out.write("format   NXCK v2 (self-describing, CRC-32C checksums, 64-byte aligned)\n")
        # Shortest decimal that reads back as the same binary32, then the exact bits.
        hyper = " ".join(
            f"{k}={np.float32(config[k])!s} ({config[k + '_bits']:#010x})"
            for k in ("lr", "beta1", "beta2", "eps")
        )
        out.write(
            f"config   sizes={clip(str(config['sizes']))} {hyper} math={clip(config['math'])}\n"
        )
        out.write(
            f"scalars  epoch={scalars['epoch']} b1t_bits={scalars['b1t_bits']:#010x} "
            f"b2t_bits={scalars['b2t_bits']:#010x}\n"
        )
        rows = []
        problems = 0
        for t in ck.tensor_table():
            status = "not checked"
            if verify:
                try:
                    ck.verify_tensor(t["name"])
                    status = "ok"
                except ChecksumError:
                    status = "BAD"
                    problems += 1
            rows.append(
                (clip(t["name"]), clip(t["dtype"]), clip(str(t["shape"])), str(t["offset"]),
                 str(t["nbytes"]), f"{t['crc32c']:#010x}", status)
            )  # fmt: skip
    _table(out, ("name", "dtype", "shape", "offset", "bytes", "crc32c", "checksum"), rows)
    return problems


def _inspect_v1(path: Path, out: TextIO) -> int:
    # v1 has no sizes: it is read with the seed model's buffer layout, and has no checksums.
    trainer = Trainer.load(path)
    out.write(
        "format   NXCK v1 (the seed's layout: no sizes, version or checksums; read with the seed "
        f"model's buffer layout {trainer.sizes})\n"
    )
    out.write(
        f"scalars  epoch={trainer.epoch} b1t_bits={_bits(trainer.b1t):#010x} "
        f"b2t_bits={_bits(trainer.b2t):#010x}\n"
    )
    rows = []
    offset = 12 + 8 * 3
    for name, array in trainer.state_dict().items():
        rows.append(
            (name, "f32", str(list(array.shape)), str(offset), str(array.nbytes), "-", "none")
        )
        offset += array.nbytes
    _table(out, ("name", "dtype", "shape", "offset", "bytes", "crc32c", "checksum"), rows)
    return 0


def _bits(value: float) -> int:
    return int(np.float32(value).view(np.uint32))


def _table(out: TextIO, header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        out.write("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
