"""Writes the hostile NXCK corpus (``tests/hostile/*.nxck``) and its manifest ``expected.json``.

Independent of the code under test: it imports no nxrs and builds every file from the format
specification (docs/FORMAT.md) with its own CRC-32C, so the header checksum of every file is
valid and a reader reaches the deeper check each file is about. Run it from anywhere:
``python tests/hostile/generate.py``; ``test_hostile.py`` also uses its builders for cases too
large to commit.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEED_SIZES = [6, 10, 4]
MAX_LAYERS = 4096  # docs/FORMAT.md: at most 4096 layers (4097 sizes)


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli), as docs/FORMAT.md defines it."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = (crc >> 8) ^ _TABLE[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF


def tensor_specs(sizes: list[int]) -> list[tuple[str, list[int]]]:
    """Names and shapes in checkpoint order: W1 b1 ... then m/v of each parameter."""
    params = []
    for layer in range(1, len(sizes)):
        params += [(f"W{layer}", [sizes[layer], sizes[layer - 1]]), (f"b{layer}", [sizes[layer]])]
    moments = [(m + name, shape) for name, shape in params for m in ("m", "v")]
    return params + moments


def align64(n: int) -> int:
    return -(-n // 64) * 64


def prelude(header: bytes, file_len: int, flags: int = 0, header_len: int | None = None) -> bytes:
    head = b"NXCK" + struct.pack(
        "<IIIQI", 0xFFFFFFFF, 2, len(header) if header_len is None else header_len, file_len, flags
    )
    return head + struct.pack("<I", crc32c(header, crc32c(head)))


def v2_file(
    edit: Callable[[dict[str, Any]], None] = lambda h: None,
    text_edit: Callable[[bytes], bytes] = lambda t: t,
    flags: int = 0,
    extra: bytes = b"",
) -> bytes:
    """A valid seed-model file, its header object changed by ``edit`` and then its JSON text by
    ``text_edit``, laid out as a writer would (tensors at the offsets the header gives), with a
    valid header CRC. ``extra`` is appended (and counted in file_len)."""
    specs = tensor_specs(SEED_SIZES)
    datas = [
        bytes((k * 37 + i) % 251 for i in range(4 * _prod(s))) for k, (_, s) in enumerate(specs)
    ]
    start = 64
    while True:
        entries, end = [], start
        for (name, shape), data in zip(specs, datas):
            offset = align64(end)
            entries.append(
                {
                    "name": name,
                    "dtype": "f32",
                    "shape": shape,
                    "offset": offset,
                    "nbytes": len(data),
                    "crc32c": crc32c(data),
                }
            )
            end = offset + len(data)
        header_obj: dict[str, Any] = {
            "config": {
                "sizes": list(SEED_SIZES),
                "math": "seed",
                "adam": {
                    "lr_bits": 0x3C23D70A,
                    "beta1_bits": 0x3F666666,
                    "beta2_bits": 0x3F7FBE77,
                    "eps_bits": 0x322BCC77,
                },
            },
            "scalars": {"epoch": 2, "b1t_bits": 0x3F4F5C29, "b2t_bits": 0x3F7F7CEE},
            "tensors": entries,
        }
        edit(header_obj)
        text = text_edit(json.dumps(header_obj, separators=(",", ":")).encode())
        if 32 + len(text) <= start:
            break
        start = align64(32 + len(text))
    header = text + b" " * (start - 32 - len(text))
    body = bytearray()
    for entry, data in zip(entries, datas):
        if isinstance(entry.get("offset"), int) and entry["offset"] >= start + len(body):
            body += bytes(entry["offset"] - start - len(body))
        body += data
    body += extra
    return prelude(header, 32 + len(header) + len(body), flags) + header + bytes(body)


def v1_file() -> bytes:
    specs = tensor_specs(SEED_SIZES)
    cells = sum(_prod(s) for _, s in specs)
    return (
        b"NXCK"
        + struct.pack("<II", len(specs), 3)
        + struct.pack("<qqq", 2, 0, 0)
        + bytes(4 * cells)
    )


def _prod(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def insert_key(raw: bytes) -> Callable[[bytes], bytes]:
    """A text edit that puts ``raw`` (a key, colon and value, then a comma) first in the header."""
    return lambda text: b"{" + raw + b"," + text[1:]


def _entry(h: dict[str, Any], name: str) -> dict[str, Any]:
    entry: dict[str, Any] = next(t for t in h["tensors"] if t["name"] == name)
    return entry


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(h: dict[str, Any]) -> None:
        target = h
        for key in path[:-1]:
            target = _entry(target, key) if key in dict(tensor_specs(SEED_SIZES)) else target[key]
        target[path[-1]] = value

    return edit


def _patch(data: bytes, at: int, value: bytes, fix_crc: bool) -> bytes:
    out = bytearray(data)
    out[at : at + len(value)] = value
    if fix_crc:
        header_len = struct.unpack_from("<I", out, 12)[0]
        crc = crc32c(bytes(out[32 : 32 + header_len]), crc32c(bytes(out[:28])))
        out[28:32] = struct.pack("<I", crc)
    return bytes(out)


def _shift(h: dict[str, Any], name: str, by: int) -> None:
    _entry(h, name)["offset"] += by


def cases() -> dict[str, tuple[bytes, dict[str, str]]]:
    """File name -> (bytes, expectation). An expectation names the exception class and a
    fragment of its message for Trainer.load and nxrs.open (``open_error``/``open_message``
    where nxrs.open, a v2-only reader, differs)."""
    good = v2_file()
    v1 = v1_file()

    def header(fragment: str) -> dict[str, str]:
        return {"error": "HeaderError", "message": fragment}

    def length(fragment: str) -> dict[str, str]:
        return {"error": "LengthError", "message": fragment}

    return {
        "unknown_math.nxck": (v2_file(_set(["config", "math"], "fast")), header('math "fast"')),
        "bad_utf8_in_unknown_key.nxck": (
            v2_file(text_edit=insert_key(b'"x\xff":1')),
            header("not UTF-8"),
        ),
        "deep_nesting.nxck": (
            v2_file(text_edit=insert_key(b'"deep":' + b"[" * 100 + b"]" * 100)),
            header("deeper than 64"),
        ),
        "duplicate_key.nxck": (v2_file(text_edit=insert_key(b'"x":1,"x":2')), header("twice")),
        "duplicate_key_nested_unknown.nxck": (
            v2_file(text_edit=insert_key(b'"meta":{"a":[1],"\\u0061":2}')),
            header('"a" twice'),
        ),
        "duplicate_known_key.nxck": (
            v2_file(text_edit=insert_key(b'"scalars":{"epoch":9,"b1t_bits":0,"b2t_bits":0}')),
            header('"scalars" twice'),
        ),
        "lone_surrogate_key.nxck": (
            v2_file(text_edit=insert_key(b'"\\ud800":1')),
            header("not Unicode text"),
        ),
        "nan_literal.nxck": (v2_file(text_edit=insert_key(b'"x":NaN')), header("JSON header")),
        "infinity_literal.nxck": (
            v2_file(text_edit=insert_key(b'"x":-Infinity')),
            header("JSON header"),
        ),
        "too_many_sizes.nxck": (
            v2_file(_set(["config", "sizes"], [1] * (MAX_LAYERS + 2))),
            header("config.sizes has more than 4097 items"),
        ),
        "long_name.nxck": (
            v2_file(_set(["W1", "name"], "W" * 20000)),
            header("is not a tensor of the configured model"),
        ),
        "long_dtype.nxck": (v2_file(_set(["W1", "dtype"], "f" * 20000)), header("dtype")),
        "dtype_f16.nxck": (v2_file(_set(["W1", "dtype"], "f16")), header('dtype "f16"')),
        "shape_rank_5.nxck": (
            v2_file(_set(["W1", "shape"], [10, 6, 1, 1, 1])),
            header("shape has more than 4 items"),
        ),
        "overlapping_offsets.nxck": (v2_file(lambda h: _shift(h, "b1", -64)), header("overlaps")),
        "misaligned_offset.nxck": (
            v2_file(lambda h: _shift(h, "W1", 4)),
            header("not 64-byte aligned"),
        ),
        "missing_tensor.nxck": (
            v2_file(lambda h: h["tensors"].pop()),
            header("tensor vb2 is missing"),
        ),
        "trailing_bytes.nxck": (v2_file(extra=bytes(64)), header("64 bytes follow")),
        "truncated.nxck": (good[:-1], length("file_len")),
        "header_len_past_eof.nxck": (
            _patch(good, 12, struct.pack("<I", 1 << 20), True),
            length("runs past the end"),
        ),
        "header_len_over_limit.nxck": (
            _patch(good, 12, struct.pack("<I", 0xFFFFFFFF), False),
            header("exceeds the limit"),
        ),
        "bad_flags.nxck": (v2_file(flags=1), header("flags")),
        "bad_header_crc.nxck": (
            _patch(good, 28, b"\0\0\0\0", False),
            {"error": "ChecksumError", "message": "header"},
        ),
        "version_3.nxck": (
            _patch(good, 8, struct.pack("<I", 3), True),
            {"error": "UnsupportedVersionError", "message": "version 3"},
        ),
        "bad_magic.nxck": (
            b"PK\x03\x04" + good[4:],
            {"error": "BadMagicError", "message": "not an NXCK"},
        ),
        "v1_truncated.nxck": (
            v1[:-5],
            {
                **length("cells"),
                "open_error": "UnsupportedVersionError",
                "open_message": "version 1",
            },
        ),
    }


def main() -> None:
    manifest = {}
    for name, (data, expected) in cases().items():
        (HERE / name).write_bytes(data)
        manifest[name] = expected
    (HERE / "expected.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
