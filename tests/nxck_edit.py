"""Edits of NXCK v2 bytes that leave a *valid* file (checksums recomputed), written from
docs/FORMAT.md alone: what a forger or a bit flip that went unnoticed would produce. Tests use
them to check that digests and ``nxrs verify`` see what the checksums cannot."""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The hostile corpus's generator holds the suite's one CRC-32C written from FORMAT.md.
sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))
from generate import crc32c


def header(data: bytes) -> dict[str, Any]:
    """The JSON header of a v2 file."""
    (header_len,) = struct.unpack_from("<I", data, 12)
    parsed: dict[str, Any] = json.loads(data[32 : 32 + header_len])
    return parsed


def config_record(data: bytes) -> str:
    """The configuration record of a v2 file's header, written again as one line, keys in file
    order: the text the state and configuration digests cover (TRAINING.md section 16)."""
    return json.dumps(header(data)["config"], separators=(",", ":"), ensure_ascii=False)


def _with_header(data: bytes, edit: Callable[[dict[str, Any]], None]) -> bytearray:
    """``data`` with its header changed by ``edit``, written again in the same room (padded
    with spaces, which FORMAT.md allows), the header checksum recomputed."""
    (header_len,) = struct.unpack_from("<I", data, 12)
    h = header(data)
    edit(h)
    text = json.dumps(h, separators=(",", ":")).encode()
    if len(text) > header_len:
        raise ValueError("the edited header does not fit its room")
    text += b" " * (header_len - len(text))
    out = bytearray(data)
    out[32 : 32 + header_len] = text
    struct.pack_into("<I", out, 28, crc32c(text, crc32c(bytes(out[:28]))))
    return out


def flip_tensor_bit(data: bytes, name: str, cell: int = 0, bit: int = 0) -> bytes:
    """``data`` with bit ``bit`` of cell ``cell`` of tensor ``name`` flipped, and the tensor's
    checksum (then the header's) recomputed: a valid file holding another state."""
    entry = next(t for t in header(data)["tensors"] if t["name"] == name)
    out = bytearray(data)
    out[entry["offset"] + 4 * cell + bit // 8] ^= 1 << (bit % 8)
    crc = crc32c(bytes(out[entry["offset"] : entry["offset"] + entry["nbytes"]]))

    def edit(h: dict[str, Any]) -> None:
        next(t for t in h["tensors"] if t["name"] == name)["crc32c"] = crc

    return bytes(_with_header(bytes(out), edit))


def edit_config(data: bytes, edit: Callable[[dict[str, Any]], None]) -> bytes:
    """``data`` with its configuration record changed by ``edit`` (a valid file)."""
    return bytes(_with_header(data, lambda h: edit(h["config"])))
