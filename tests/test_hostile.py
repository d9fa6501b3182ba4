"""Hostile checkpoint files: every refusal is a typed CheckpointError with a short message, for
every reader (nxrs.open, Trainer.load/restore, checkpoint_format, ``nxrs inspect``); and the
files themselves: only regular files, any path the OS accepts, no crash when a file is
rewritten under a reader.

The committed corpus ``tests/hostile/`` is written by ``tests/hostile/generate.py``, which does
not import nxrs; cases too large to commit are built at test time with its builders.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import nxrs
from nxrs.cli import main as cli_main

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))
import generate  # tests/hostile/generate.py, found through the path entry above

HOSTILE = Path(__file__).resolve().parent / "hostile"
EXPECTED: dict[str, dict[str, str]] = json.loads((HOSTILE / "expected.json").read_text())
SHORT = 1000  # bytes: the most any refusal's message may take


def test_the_corpus_is_what_the_generator_writes() -> None:
    cases = generate.cases()
    assert sorted(cases) == sorted(EXPECTED)
    for name, (data, expected) in cases.items():
        assert (HOSTILE / name).read_bytes() == data, name
        assert EXPECTED[name] == expected, name
    assert sum(p.stat().st_size for p in HOSTILE.iterdir()) < 200_000


def refusal(call: Callable[[], object]) -> nxrs.CheckpointError:
    with pytest.raises(nxrs.CheckpointError) as info:
        call()
    return info.value


def check(err: BaseException, cls: str, fragment: str) -> None:
    assert type(err).__name__ == cls, f"{type(err).__name__}: {err}"
    assert fragment in str(err), str(err)
    assert len(str(err)) < SHORT, len(str(err))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_reader_refuses_the_hostile_file(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = HOSTILE / name
    expected = EXPECTED[name]
    cls, fragment = expected["error"], expected["message"]
    open_cls = expected.get("open_error", cls)
    open_fragment = expected.get("open_message", fragment)
    for verify in (True, False):
        check(refusal(lambda v=verify: nxrs.open(path, verify=v)), open_cls, open_fragment)
    check(refusal(lambda: nxrs.Trainer.load(path)), cls, fragment)
    # The seed model's configuration, as the corpus's files record it (restore refuses another
    # configuration before it looks further); a step makes its state differ from the files'.
    victim = nxrs.Trainer(seed=1)
    victim.step(nxrs.seed_dataset()[0][0], 1)
    before = victim.state_hash()
    check(refusal(lambda: victim.restore(path)), cls, fragment)
    assert victim.state_hash() == before
    # checkpoint_format reads 12 bytes: it tells the version, or refuses what those show.
    try:
        assert nxrs.checkpoint_format(path) in (1, 2)
    except nxrs.CheckpointError as err:
        assert type(err).__name__ == cls
    # nxrs inspect: exit 1, one line naming the exception, no traceback.
    assert cli_main(["inspect", str(path)]) == 1
    err_lines = capsys.readouterr().err.splitlines()
    assert len(err_lines) == 1 and len(err_lines[0]) < SHORT, err_lines
    assert re.search(r": \w+Error: ", err_lines[0]) and "Traceback" not in err_lines[0]


def test_inspect_of_a_hostile_file_is_one_line_without_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nxrs", "inspect", str(HOSTILE / "long_name.nxck")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout.startswith("file ") and proc.stdout.count("\n") == 1
    assert proc.stderr.count("\n") == 1 and "HeaderError" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr) < SHORT


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    return generate._set(path, value)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (_set(["W1", "name"], "W" * (8 << 20)), "characters)"),
        (_set(["W1", "dtype"], "é" * (4 << 20)), "characters)"),
        (_set(["config", "math"], "x" * (8 << 20)), "characters)"),
        (_set(["config", "sizes"], [7] * (2 << 20)), "more than 4097 items"),
        (_set(["W1", "shape"], [1] * (2 << 20)), "more than 4 items"),
        (_set(["scalars", "epoch"], "e" * (8 << 20)), "characters)"),
    ],
    ids=["name", "dtype", "math", "sizes", "shape", "string-for-integer"],
)
def test_megabytes_of_hostile_values_give_short_messages(
    edit: Callable[[dict[str, Any]], None],
    fragment: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "big.nxck"
    path.write_bytes(generate.v2_file(edit))
    for read in (nxrs.open, nxrs.Trainer.load):
        err = refusal(lambda r=read: r(path))  # type: ignore[misc]
        check(err, "HeaderError", fragment)
    assert cli_main(["inspect", str(path)]) == 1
    captured = capsys.readouterr()
    assert len(captured.out) + len(captured.err) < SHORT


def format_md_reader() -> Callable[[bytes], Any]:
    """The standard-library reader printed in docs/FORMAT.md's appendix."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "FORMAT.md").read_text()
    appendix = doc[doc.index("## Appendix") :]
    code = re.search(r"```python\n(.*?)```", appendix, re.S)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(code.group(1), namespace)
    reader: Callable[[bytes], Any] = namespace["read_nxck_v2"]
    return reader


STRICTNESS = [
    "bad_utf8_in_unknown_key.nxck",
    "deep_nesting.nxck",
    "duplicate_key.nxck",
    "duplicate_key_nested_unknown.nxck",
    "duplicate_known_key.nxck",
    "lone_surrogate_key.nxck",
    "nan_literal.nxck",
    "infinity_literal.nxck",
]


def test_the_format_md_reader_agrees_with_nxrs(tmp_path: Path) -> None:
    read = format_md_reader()
    t = nxrs.Trainer(seed=3)
    x, y = nxrs.seed_dataset()
    t.train_until(x, y, 2)
    t.save(tmp_path / "good.nxck")
    config, scalars, tensors = read((tmp_path / "good.nxck").read_bytes())
    assert config["sizes"] == [6, 10, 4] and scalars["epoch"] == 2
    assert list(tensors) == list(t.state_dict())
    assert read(generate.v2_file())[0]["math"] == "seed"  # the generator's base file is valid
    for name in EXPECTED:
        if name.startswith("v1"):
            continue
        with pytest.raises(ValueError if name in STRICTNESS else Exception):
            read((HOSTILE / name).read_bytes())
    # A million levels: refused by the nesting check, not by Python's recursion limit.
    deep = generate.v2_file(text_edit=generate.insert_key(b'"d":' + b"[" * 10**6 + b"]" * 10**6))
    with pytest.raises(ValueError, match="nest"):
        read(deep)
    with pytest.raises(nxrs.HeaderError, match="deeper than 64"):
        (tmp_path / "deep.nxck").write_bytes(deep)
        nxrs.open(tmp_path / "deep.nxck")


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    """A FIFO used to hang open/load/checkpoint_format for good: run in a child with a timeout."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    script = """
import json, sys, nxrs
out = []
for path in sys.argv[1:]:
    for call in (nxrs.open, nxrs.Trainer.load, nxrs.checkpoint_format, nxrs.Trainer().restore):
        try:
            call(path)
            out.append(None)
        except OSError as e:
            out.append([type(e).__name__, e.errno, e.strerror, e.filename])
print(json.dumps(out))
"""
    paths = [str(fifo), str(tmp_path), os.devnull]
    proc = subprocess.run(
        [sys.executable, "-c", script, *paths], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    kinds = {str(fifo): "a FIFO", str(tmp_path): "a directory", os.devnull: "a character device"}
    for k, result in enumerate(results):
        path = paths[k // 4]
        assert result is not None, path
        cls, errno, strerror, filename = result
        is_dir = path == str(tmp_path)
        assert cls == ("IsADirectoryError" if is_dir else "OSError")
        assert errno == (21 if is_dir else 22)
        assert f"not a regular file ({kinds[path]})" in strerror and filename == path


@pytest.mark.skipif(sys.platform == "darwin", reason="APFS refuses names that are not UTF-8")
def test_paths_that_are_not_utf8(tmp_path: Path) -> None:
    raw_dir = os.fsencode(tmp_path) + b"/dir\xff"
    os.mkdir(raw_dir)
    t = nxrs.Trainer(seed=2)
    for path in (raw_dir + b"/ck\xff.nxck", os.fsdecode(raw_dir + b"/ck\xfe.nxck")):
        t.save(path)
        t.save(path, format="v2")  # over an existing file, through a temporary name
        assert nxrs.Trainer.load(path).state_hash() == t.state_hash()
        other = nxrs.Trainer(seed=2)  # restore needs the file's configuration (seed included)
        other.step(nxrs.seed_dataset()[0][0], 1)
        assert other.state_hash() != t.state_hash()
        other.restore(path)
        assert other.state_hash() == t.state_hash()
        with nxrs.open(path) as ck:
            assert os.fsencode(ck.path) == os.fsencode(path)
        assert nxrs.checkpoint_format(path) == 2
    # A leftover of a dead writer, named after a non-UTF-8 target, is swept.
    leftover = raw_dir + b"/.ck\xef\xbf\xbd.nxck.nxck-tmp.00000000.1.0123456789abcdef"
    open(leftover, "wb").close()
    old = time.time() - 2 * 3600
    os.utime(leftover, (old, old))
    assert [os.fsencode(p) for p in nxrs.sweep_temp_files(raw_dir)] == [leftover]
    assert nxrs.sweep_temp_files(os.fsdecode(raw_dir)) == []
    assert sorted(os.listdir(raw_dir)) == [b"ck\xfe.nxck", b"ck\xff.nxck"]
    with pytest.raises(FileNotFoundError) as info:
        nxrs.Trainer.load(raw_dir + b"/missing\xff")
    assert os.fsencode(info.value.filename) == raw_dir + b"/missing\xff"


RACE_CHILD = """
import sys, time, nxrs
path, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
loads = refusals = 0
while time.monotonic() < deadline:
    try:
        nxrs.Trainer.load(path)
        loads += 1
    except (nxrs.CheckpointError, OSError):
        refusals += 1
print(loads, refusals)
"""


def test_loading_while_another_process_rewrites_the_file_in_place(tmp_path: Path) -> None:
    """shutil.copyfile truncates and rewrites the target in place; a reader that maps the file
    dies of SIGBUS when a truncation passes under it. Loading reads the file instead."""
    small, large, target = tmp_path / "small", tmp_path / "large", tmp_path / "target"
    nxrs.Trainer(seed=1).save(small)
    nxrs.Trainer(seed=2, sizes=[64, 512, 64, 10]).save(large)  # about 0.5 MB
    shutil.copyfile(large, target)
    rewriter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import shutil, sys\n"
            "while True:\n"
            "    for source in sys.argv[1:3]:\n"
            "        shutil.copyfile(source, sys.argv[3])\n",
            str(small),
            str(large),
            str(target),
        ]
    )
    results = []
    try:
        for _batch in range(5):  # 50 children, 10 at a time, each loading for 1 s
            children = [
                subprocess.Popen(
                    [sys.executable, "-c", RACE_CHILD, str(target), "1.0"],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for _ in range(10)
            ]
            for child in children:
                out, _ = child.communicate(timeout=60)
                results.append((child.returncode, out))
    finally:
        rewriter.kill()
        rewriter.wait()
    assert len(results) == 50
    died = [code for code, _ in results if code != 0]
    assert died == [], f"children died: {died}"  # -7 is SIGBUS (what mapping the file gives)
    loads = sum(int(out.split()[0]) for _, out in results)
    assert loads > 0  # the race was run against loadable files, not only refusals
