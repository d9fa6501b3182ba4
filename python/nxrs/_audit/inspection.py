"""``nxrs inspect FILE``: what a checkpoint holds, and whether it is intact."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from nxrs import _nxrs
from nxrs._checkpoint import open
from nxrs._nxrs import ChecksumError, checkpoint_format, clip
from nxrs._trainer import Trainer

#: The tensor table's columns, in ``describe_checkpoint``'s keys and in the printed table.
_COLUMNS = ("name", "dtype", "shape", "offset", "nbytes", "crc32c", "checksum")


def describe_checkpoint(path: Path, *, verify: bool = False) -> dict[str, Any]:
    """What the checkpoint at ``path`` holds, as plain JSON-ready values.

    Keys: ``file``, ``bytes``, ``format`` (1 or 2), ``config`` (v2: TRAINING.md's keys with
    ``<key>_bits``; v1: only ``sizes``, the seed model's), ``scalars`` (``epoch``, ``b1t_bits``,
    ``b2t_bits``, and in v2 ``step`` and ``batch``), ``metadata`` (v2's strings), ``tensors``
    (one dict per tensor in file order: name, dtype, shape, offset, nbytes, crc32c (None in v1),
    checksum: "ok", "BAD", "not checked" or, in v1, "none"), ``problems`` (the tensors whose
    CRC-32C failed; computed only with ``verify``) and ``state_digest`` (the SHA-256 state digest
    a run's transcript records, ``docs/TRAINING.md`` section 16; only with ``verify`` and no
    problems, else None). Raises an ``NxrsError`` (or ``OSError``)
    when the file cannot be read as a checkpoint at all.
    """
    version = checkpoint_format(path)
    summary: dict[str, Any] = {"file": str(path), "bytes": path.stat().st_size, "format": version}
    summary.update(_describe_v1(path) if version == 1 else _describe_v2(path, verify))
    summary["problems"] = sum(t["checksum"] == "BAD" for t in summary["tensors"])
    verified = verify and summary["problems"] == 0
    summary["state_digest"] = Trainer.load(path).state_digest() if verified else None
    return summary


def inspect_checkpoint(path: Path, out: TextIO, *, verify: bool = False) -> int:
    """Prints the format, configuration, scalars and tensor table; returns the problem count.

    With ``verify``, every tensor's CRC-32C is computed and each failure is a problem; without
    it, only the header is validated and the tensors' checksum status is "not checked".
    Values from the file are printed clipped (as nxrs's messages clip them), so a hostile
    header cannot flood the terminal. Raises an ``NxrsError`` (or ``OSError``) when the file
    cannot be read as a checkpoint at all (after printing the file line).
    """
    out.write(f"file     {path} ({path.stat().st_size} bytes)\n")
    summary = describe_checkpoint(path, verify=verify)
    scalars = summary["scalars"]
    if summary["format"] == 1:
        out.write(
            "format   NXCK v1 (the seed's layout: no sizes, version or checksums; read with the "
            f"seed model's buffer layout {summary['config']['sizes']})\n"
        )
    else:
        config = summary["config"]
        out.write("format   NXCK v2 (self-describing, CRC-32C checksums, 64-byte aligned)\n")
        # Shortest decimal that reads back as the same binary32, then the exact bits.
        hyper = " ".join(
            f"{k}={np.float32(config[k])!s} ({config[k + '_bits']:#010x})"
            for k in ("lr", "beta1", "beta2", "eps")
        )
        model = (
            f"sizes={clip(str(config['sizes']))}"
            if config["sizes"]
            else f"layers ({len(config['layers']) - 1} after Input)"
        )
        out.write(f"config   {model} {hyper} math={clip(config['math'])}\n")
        if not config["sizes"]:
            _layer_rows(out, config["layers"])
    out.write(
        f"scalars  epoch={scalars['epoch']} b1t_bits={scalars['b1t_bits']:#010x} "
        f"b2t_bits={scalars['b2t_bits']:#010x}\n"
    )
    rows = [
        (clip(t["name"]), clip(t["dtype"]), clip(str(t["shape"])), str(t["offset"]),
         str(t["nbytes"]), "-" if t["crc32c"] is None else f"{t['crc32c']:#010x}", t["checksum"])
        for t in summary["tensors"]
    ]  # fmt: skip
    _table(out, ("name", "dtype", "shape", "offset", "bytes", "crc32c", "checksum"), rows)
    if summary["state_digest"] is not None:
        out.write(f"state digest {summary['state_digest']}\n")
    problems: int = summary["problems"]
    return problems


def _layer_rows(out: TextIO, layers: list[dict[str, Any]]) -> None:
    """A layer model's table: each layer's position, type (indented by the Residuals it is in),
    input and output shapes and tensors (the core's reading of the file's layer list)."""
    rows = [
        (
            str(row["position"]),
            "  " * row["depth"] + row["type"],
            "x".join(map(str, row["input"])),
            "x".join(map(str, row["output"])),
            " ".join(f"{name}[{','.join(map(str, shape))}]" for name, shape in row["tensors"]),
        )
        for row in _nxrs._layer_table(layers)
    ]
    _table(out, ("layer", "type", "input", "output", "tensors"), rows)


def _describe_v2(path: Path, verify: bool) -> dict[str, Any]:
    with open(path, verify=False) as ck:
        tensors = []
        for t in ck.tensor_table():
            status = "not checked"
            if verify:
                try:
                    ck.verify_tensor(t["name"])
                    status = "ok"
                except ChecksumError:
                    status = "BAD"
            tensors.append({**{k: t[k] for k in _COLUMNS[:-1]}, "checksum": status})
        return {
            "config": ck.config,
            "scalars": ck.scalars,
            "metadata": ck.metadata,
            "tensors": tensors,
        }


def _describe_v1(path: Path) -> dict[str, Any]:
    # v1 has no sizes: it is read with the seed model's buffer layout, and has no checksums.
    trainer = Trainer.load(path)
    tensors = []
    offset = 12 + 8 * 3
    for name, array in trainer.state_dict().items():
        tensors.append(
            {"name": name, "dtype": "f32", "shape": list(array.shape), "offset": offset,
             "nbytes": array.nbytes, "crc32c": None, "checksum": "none"}
        )  # fmt: skip
        offset += array.nbytes
    return {
        "config": {"sizes": trainer.sizes},
        "scalars": {
            "epoch": trainer.epoch,
            "b1t_bits": _bits(trainer.b1t),
            "b2t_bits": _bits(trainer.b2t),
        },
        "metadata": {},
        "tensors": tensors,
    }


def _bits(value: float) -> int:
    return int(np.float32(value).view(np.uint32))


def _table(out: TextIO, header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        out.write("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
