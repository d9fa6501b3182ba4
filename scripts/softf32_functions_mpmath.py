#!/usr/bin/env python3
"""Decide, in arbitrary precision, the softf32 function inputs the binary64 oracle deferred.

The exhaustive Rust check (``rust/nxrs-core/tests/exhaustive_functions.rs``) writes one line per
deferred input, ``<op> <input hex> <softf32 result hex>`` with op ``exp``, ``ln``,
``normal_cdf`` (the standard normal CDF ``Φ``) or ``normal_pdf`` (its density ``φ``). This script
computes each exact result with mpmath at 256 bits, rounds it to binary32 (to nearest, ties to
even, subnormals kept), and compares. It refuses to decide (and fails) if the 256-bit value were
within 2^-200 of a rounding boundary, which would make 256 bits too few; no input comes close.

It also reports how close the hardest inputs come to a rounding boundary, in binary32 ulps.

    python3 scripts/softf32_functions_mpmath.py target/softf32-deferred-*.txt \
        [--hard-cases OUT.txt]

``--hard-cases`` writes the decided inputs as ``<op> <input hex> <correct result hex>`` lines
(the format of ``rust/nxrs-core/tests/data/function_hard_cases.txt``). Needs ``mpmath``.
"""

from __future__ import annotations

import argparse
import struct
import sys
from typing import Callable

import mpmath

mpmath.mp.prec = 256

#: The exact functions, by the op names of the deferred files. mpmath's ``ncdf`` is
#: ``erfc(-x/√2)/2``, relatively accurate in the far tail too (checked against 600 bits at
#: ``x = -14.17``: within ``2^-250``).
FUNCTIONS: dict[str, Callable[[mpmath.mpf], mpmath.mpf]] = {
    "exp": mpmath.exp,
    "ln": mpmath.log,
    "normal_cdf": mpmath.ncdf,
    "normal_pdf": mpmath.npdf,
}


def f32_value(bits: int) -> mpmath.mpf:
    return mpmath.mpf(struct.unpack("<f", struct.pack("<I", bits))[0])


def round_to_f32(v: mpmath.mpf) -> tuple[int, mpmath.mpf]:
    """The binary32 bits nearest ``v`` (ties to even), and ``v``'s distance from the nearest
    rounding boundary in units of the binary32 quantum (0.5 means on a representable value)."""
    if v == 0:
        return 0, mpmath.mpf("0.5")
    sign = 0x8000_0000 if v < 0 else 0
    a = abs(v)
    _, e = mpmath.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    quantum = mpmath.ldexp(1, max(int(e) - 24, -149))
    n = a / quantum
    whole = int(mpmath.floor(n))
    frac = n - whole
    distance = abs(frac - mpmath.mpf("0.5"))
    if distance < mpmath.ldexp(n, -200):
        raise ArithmeticError(f"{v} is within 2^-200 of a rounding boundary")
    if frac > 0.5:
        whole += 1
    rounded = whole * quantum
    if rounded >= mpmath.ldexp(1, 128):
        return sign | 0x7F80_0000, distance
    bits = struct.unpack("<I", struct.pack("<f", float(rounded)))[0]
    return sign | bits, distance


def exact(op: str, x: int) -> mpmath.mpf:
    if op not in FUNCTIONS:
        raise ValueError(f"unknown op {op!r}")
    return FUNCTIONS[op](f32_value(x))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--hard-cases", help="write the decided inputs and results here")
    args = parser.parse_args()

    decided: list[tuple[str, int, int, mpmath.mpf]] = []
    mismatches = 0
    for path in args.files:
        with open(path) as lines:
            for line in lines:
                if not line.strip() or line.startswith("#"):
                    continue
                op, x_hex, got_hex = line.split()
                x, got = int(x_hex, 16), int(got_hex, 16)
                want, distance = round_to_f32(exact(op, x))
                decided.append((op, x, want, distance))
                if got != want:
                    mismatches += 1
                    print(f"MISMATCH {op}({x:08x}): softf32 {got:08x}, mpmath {want:08x}")

    for op in sorted({d[0] for d in decided}):
        cases = sorted((d for d in decided if d[0] == op), key=lambda d: d[3])
        print(f"{op}: {len(cases)} deferred inputs decided at {mpmath.mp.prec} bits")
        for _, x, want, distance in cases[:3]:
            ulps = float(mpmath.log(distance, 2))
            print(f"  hardest: {op}({x:08x}) = {want:08x}, 2^{ulps:.1f} ulp from a boundary")
    print(f"{mismatches} mismatches")

    if args.hard_cases:
        with open(args.hard_cases, "w") as out:
            out.write("# <op> <input> <correctly rounded result>: the inputs whose binary64\n")
            out.write("# oracle result (tests/support/oracle.rs) lies within 64 binary64 ulps of a\n")
            out.write("# binary32 rounding boundary, decided by scripts/softf32_functions_mpmath.py\n")
            out.write("# at 256 bits.\n")
            for op, x, want, _ in sorted(decided):
                out.write(f"{op} {x:08x} {want:08x}\n")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
