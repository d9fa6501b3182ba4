"""Loading a trainer reads the checkpoint straight into the state: one copy of it in memory.

Before, `Trainer.load` and `restore` read the whole file into a buffer and then copied every
tensor out of it (peak memory: the file plus the state, twice the state), and
`Trainer.from_bytes` copied the `bytes` once more before that. Each is measured in a fresh
process with `getrusage` (the peak resident memory before and after the call), on ~100 MB of
state.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import nxrs

SIZES = [1024, 4096, 1024]  # 8,393,728 parameters, 3 tensors' worth each: 100.7 MB of state
LIMIT = 1.1  # of the state's bytes, above the peak before the call

CHILD = """
import os, resource, sys
# Linux starts a process's getrusage peak at the high-water mark of the process it was forked
# from (and keeps it across exec): measure in a child of this small interpreter, not of the
# large process that started it.
pid = os.fork()
if pid:
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
from pathlib import Path
import nxrs

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

kind, path = sys.argv[1:3]
if kind == "load":
    call = lambda: nxrs.Trainer.load(path)
elif kind == "from_bytes":
    data = Path(path).read_bytes()
    call = lambda: nxrs.Trainer.from_bytes(data)
else:
    # The file's configuration (not a load of it, whose own peak would hide restore's).
    trainer = nxrs.Trainer(seed=1, sizes=[int(n) for n in sys.argv[3].split(",")])
    call = lambda: trainer.restore(path)
before = peak()
result = call()
print(before, peak())
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("memory") / "big.nxck"
    trainer = nxrs.Trainer(seed=1, sizes=SIZES)
    trainer.save(path)
    nbytes = sum(a.nbytes for a in trainer.state_dict().values())
    return path, nbytes


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB and THP: Linux")
@pytest.mark.parametrize("kind", ["load", "from_bytes", "restore"])
def test_loading_holds_one_copy_of_the_state(kind: str, checkpoint: tuple[Path, int]) -> None:
    path, nbytes = checkpoint
    out = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(path), ",".join(map(str, SIZES))],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    before, after = (int(v) for v in out.split())
    grown = after - before
    assert grown <= LIMIT * nbytes, f"{kind}: {grown / nbytes:.2f}x the state's {nbytes} bytes"
