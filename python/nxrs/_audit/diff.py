"""``nxrs diff``: why two runs (or two checkpoints) of one configuration differ.

Two run directories: their transcripts (``nxrs._runs.transcript``) are compared at the steps both
record; the last step at which both record the same state digest is the last common state
known from the transcripts, the first at which they differ bounds the search. Both runs are
then replayed from a kept checkpoint at or before the common state (or from a fresh trainer of
the configuration, when that is the state a run started from), each on its own data, one step
at a time, to the first step after which their states differ: that step, the first differing
tensor cell (``first_difference``) and the runs' data digests answer "why did my two runs
differ". Each replayed state a transcript records is checked against it, so data that is not a
run's own is a MismatchError, not a wrong answer.

Two checkpoint files: at one step, their first difference directly; at different steps, the
earlier replayed forward on the data given to the later's step, then compared.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy.typing as npt

from nxrs._audit.replay import ReadCommand, RunData, first_difference, replay, replay_step
from nxrs._nxrs import CheckpointError, InputError, MismatchError
from nxrs._runs.directory import open_run_directory
from nxrs._runs.object_checkpoints import local_copy
from nxrs._runs.transcript import TRANSCRIPT_NAME
from nxrs._util.config import config_diff

if TYPE_CHECKING:
    from nxrs._trainer import Trainer

__all__ = ["DiffReport", "DiffSide", "diff"]


@dataclass
class DiffSide:
    """One side of a diff: a run directory (``kind="run"``) or a checkpoint file
    (``kind="checkpoint"``), as it was found."""

    path: str
    kind: str
    #: The last step the run's transcript records, or the checkpoint's step.
    last_step: int
    #: The state digest at ``last_step`` (``docs/TRAINING.md`` section 16).
    state_digest: str
    config_digest: str
    #: The run's data digest and those of its parts (``train``, ``validation``, ``test``), as
    #: its transcript records them; None for a checkpoint file.
    data_digest: str | None = None
    data: dict[str, str | None] | None = None
    #: A checkpoint's data fingerprint (its metadata), None when it records none.
    data_fingerprint: str | None = None
    #: Transcript entries (runs only).
    entries: int | None = None
    #: The ``nxrs train`` command line that made the run (None for ``fit`` runs and files).
    command: list[str] | None = None


@dataclass
class DiffReport:
    """What ``nxrs.diff`` found. ``str(report)`` says it in words, ``to_dict()`` as JSON."""

    #: True when the states are the same bits up to ``common_step``, as far as both go.
    identical: bool
    #: The last step after which both states are known to be the same bits (None when not
    #: known: two checkpoint files that differ at one step).
    common_step: int | None
    #: The first step after which the states differ (the state count: "the states first
    #: differ after step 37"); None when identical or not known (two files at one step).
    first_differing_step: int | None
    #: Where the states first differ, in ``first_difference``'s words (None when identical).
    difference: str | None
    #: Whether the two runs' training data differ (by the transcripts' data digests, or the
    #: checkpoints' data fingerprints); None when that is not known.
    data_differ: bool | None
    a: DiffSide
    b: DiffSide
    #: The step at which the states were compared last: the differing one, or the last one
    #: both runs (or files) reach when identical.
    compared_step: int | None = None
    #: The step the replay started from and how many steps each side replayed (0: none).
    replayed_from: int | None = None
    replayed_steps: int = 0
    #: What the replay started from: a checkpoint file, or "the configuration" (a fresh
    #: trainer: the state both runs started from).
    replay_source: str | None = None
    #: The parts of the data (``train``, ``validation``, ``test``) whose digests differ.
    data_parts_differ: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (every field; ``a`` and ``b`` as objects)."""
        return asdict(self)

    def to_json(self, indent: int | None = 1) -> str:
        """``to_dict`` as strict JSON text."""
        from nxrs._util.files import json_text

        return json_text(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        lines = [f"A: {_describe(self.a)}", f"B: {_describe(self.b)}"]
        if self.identical:
            lines.append(f"identical: the states are the same bits up to step {self.common_step}")
        elif self.first_differing_step is not None:
            lines.append(f"the states first differ after step {self.first_differing_step}")
            lines.append(f"  last common step {self.common_step}")
            lines.append(f"  first difference: {self.difference}")
        else:
            lines.append(f"the states differ at step {self.compared_step}")
            lines.append(f"  first difference: {self.difference}")
        if self.replayed_from is not None and self.replayed_steps:
            lines.append(
                f"  replayed {self.replayed_steps} step(s) of each from step "
                f"{self.replayed_from} ({self.replay_source})"
            )
        if self.a.data_digest is not None and self.b.data_digest is not None:
            lines.append(f"  data digest A {self.a.data_digest}")
            lines.append(f"  data digest B {self.b.data_digest}")
        if self.data_differ:
            parts = ", ".join(self.data_parts_differ)
            lines.append(
                "  the runs' training data differ"
                if "train" in self.data_parts_differ
                else f"  the runs' data differ ({parts})"
                if parts
                else "  the checkpoints' training data fingerprints differ"
            )
        elif self.data_differ is False:
            lines.append("  the runs' data are the same")
        return "\n".join(lines) + "\n"


def _describe(side: DiffSide) -> str:
    if side.kind == "run":
        return f"run {side.path} ({side.entries} transcript entries, last step {side.last_step})"
    return f"checkpoint {side.path} (step {side.last_step})"


def diff(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    x: npt.ArrayLike | None = None,
    y: npt.ArrayLike | None = None,
    *,
    x_b: npt.ArrayLike | None = None,
    y_b: npt.ArrayLike | None = None,
    data: str | None = None,
    data_b: str | None = None,
    _read_command: ReadCommand | None = None,
) -> DiffReport:
    """Why two runs of one configuration differ: ``a`` and ``b`` are two run directories (of
    ``fit`` or ``nxrs train --ckpt-dir``) or two checkpoint files.

    Run directories: their transcripts give the last common state and the first recorded
    step whose states differ; both runs are replayed from the common state (a kept checkpoint
    at or before it in either directory, or a fresh trainer of the configuration when that is
    the runs' start) one step at a time, each on its own data, to the first step after which
    their states differ. Each run's data: ``x``, ``y`` (``x_b``, ``y_b`` for ``b``, by default
    ``x``, ``y``), or, for ``nxrs train`` runs, read and split again as the command its manifest
    records did, ``data`` (``data_b`` for ``b``, by default ``data``) replacing its data file;
    for ``fit`` runs, ``data`` is a file (``nxrs.data.load``) whose samples were ``fit``'s.
    Data is needed only when something must be replayed (InputError otherwise); data that is not
    the run's (its training data digest differs from the transcript's) is a MismatchError.
    When the transcripts show no difference, the runs are compared up to the shorter one's
    last step.

    Checkpoint files: at one step, their first difference; at different steps, the earlier
    is replayed to the later's step on ``x``, ``y``, or on the file ``data`` read as the
    earlier's run directory (the manifest beside it) read its data: the train split of an
    ``nxrs train`` run, the whole file otherwise (one of them required then: InputError).

    MismatchError (naming the settings) when the two are of different configurations;
    InputError for a path that is neither a run directory nor a file, or a file and a
    directory.

    ``_read_command`` is for nxrs's own command line (the reader of the command line an older
    nxrs's manifest records in place of its data source); not part of the API.
    """
    # On object storage: local copies of the run directories' or checkpoints' objects (the
    # report and its messages name them as given).
    pa, pb = local_copy(a), local_copy(b)
    if pa.is_dir() and pb.is_dir():
        given_a = None if x is None or y is None else RunData(x, y)
        xb, yb = (x, y) if x_b is None and y_b is None else (x_b, y_b)
        given_b = None if xb is None or yb is None else RunData(xb, yb)
        if (x is None) != (y is None) or (xb is None) != (yb is None):
            raise InputError("give the data as both x and y (x_b and y_b)")
        return _diff_runs(
            _Run.read(a, pa, "A", given_a, data, _read_command),
            _Run.read(b, pb, "B", given_b, data if data_b is None else data_b, _read_command),
        )
    for location, p in ((a, pa), (b, pb)):
        if not p.exists():
            raise InputError(f"{location}: no such run directory or checkpoint file")
    if pa.is_dir() or pb.is_dir():
        raise InputError(
            f"{a} and {b}: compare two run directories or two checkpoint files, not one of each"
        )
    if x_b is not None or y_b is not None or data_b is not None:
        raise InputError(
            "two checkpoint files take one data to replay on (x and y, or data), not B's"
        )
    if x is not None and data is not None:
        raise InputError("give the data to replay on as x and y, or as data (a file), not both")
    return _diff_files((str(a), pa), (str(b), pb), x, y, data, _read_command)


def _same_config(a: dict[str, Any], b: dict[str, Any], digests: tuple[str, str]) -> None:
    names = config_diff(a, b)
    if names:
        shown = ", ".join(f"{n} ({a.get(n)!r} vs {b.get(n)!r})" for n in names)
        raise MismatchError(f"A and B have different configurations: {shown}")
    if digests[0] != digests[1]:
        raise MismatchError(
            f"A and B have different configurations (config digests {digests[0][:16]} vs "
            f"{digests[1][:16]})"
        )


class _Run:
    """A run directory: its manifest's configuration, its transcript by step, and how to get
    its data."""

    def __init__(
        self,
        name: str,
        path: Path,
        label: str,
        manifest: dict[str, Any],
        entries: list[dict[str, Any]],
        given: RunData | None,
        data_file: str | None,
        read_command: ReadCommand | None = None,
    ) -> None:
        #: ``name``: the run as given (a path or URL); ``path``: where its checkpoints are read
        #: (a run on object storage: a local copy).
        self.name, self.path, self.label = name, path, label
        self.manifest, self.entries = manifest, entries
        self.by_step = {int(e["step"]): e for e in entries}
        self.given, self.data_file = given, data_file
        self.read_command = read_command
        self._data: RunData | None = None

    @classmethod
    def read(
        cls,
        location: str | os.PathLike[str],
        path: Path,
        label: str,
        given: RunData | None,
        data_file: str | None,
        read_command: ReadCommand | None = None,
    ) -> _Run:
        run = open_run_directory(location)
        manifest = run.read_manifest()
        try:
            entries = run.transcript().read()
        except ValueError as err:
            raise InputError(f"run {label}: {err}") from None
        if manifest is None or not entries:
            raise InputError(
                f"run {label} ({location}): not a run directory of nxrs train or fit with a "
                f"transcript (no manifest or no {TRANSCRIPT_NAME})"
            )
        for e in entries:
            if not isinstance(e.get("step"), int) or not isinstance(e.get("state_digest"), str):
                raise InputError(
                    f"run {label}: transcript entry {e.get('entry')} has no step or state "
                    "digest (nxrs verify checks the transcript)"
                )
        return cls(str(location), path, label, manifest, entries, given, data_file, read_command)

    @property
    def last(self) -> dict[str, Any]:
        return self.entries[-1]

    @property
    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = self.manifest.get("config", {})
        return config

    def side(self) -> DiffSide:
        last = self.last
        command = self.manifest.get("command")
        return DiffSide(
            path=self.name,
            kind="run",
            last_step=int(last["step"]),
            state_digest=last["state_digest"],
            config_digest=last.get("config_digest", ""),
            data_digest=last.get("data_digest"),
            data=last.get("data"),
            entries=len(self.entries),
            command=command if isinstance(command, list) else None,
        )

    def data(self, trainer: Trainer) -> RunData:
        """The run's data, checked against the training data digest its transcript records."""
        if self._data is not None:
            return self._data
        if self.given is not None:
            data = self.given
        else:
            option, parameter = ("--data", "data") if self.label == "A" else ("--data-b", "data_b")
            how = f"{option} FILE; {parameter}=FILE in Python"
            try:
                data = RunData.of_run(
                    self.manifest,
                    self.data_file,
                    f"run {self.label} ({self.name})",
                    how,
                    self.read_command,
                )
            except MismatchError as err:
                raise InputError(str(err)) from None  # no data given: a missing input here
        recorded = (self.last.get("data") or {}).get("train")
        found = data.digests(trainer).train
        if recorded is not None and found != recorded:
            raise MismatchError(
                f"the data given for run {self.label} is not the data it trained on (training "
                f"data digest {found[:16]}, its transcript records {recorded[:16]})"
            )
        self._data = data
        return data

    def named(self, path: Path) -> str:
        """The checkpoint file ``path`` (in ``self.path``) as the run is named (beside its URL,
        not in its local copy)."""
        return f"{self.name.rstrip('/')}/{path.name}"

    def checkpoint(self, step: int) -> Path | None:
        """The kept checkpoint file of the transcript's entry at ``step``, if any."""
        name = self.by_step[step].get("checkpoint")
        if not isinstance(name, str) or "/" in name or os.sep in name:
            return None
        path = self.path / name
        return path if path.is_file() else None


def _data_parts_differ(a: DiffSide, b: DiffSide) -> list[str]:
    pa, pb = a.data or {}, b.data or {}
    return [k for k in ("train", "validation", "test") if pa.get(k) != pb.get(k)]


def _diff_runs(ra: _Run, rb: _Run) -> DiffReport:
    from nxrs._trainer import Trainer

    _same_config(
        ra.config, rb.config, (ra.last.get("config_digest", ""), rb.last.get("config_digest", ""))
    )
    side_a, side_b = ra.side(), rb.side()
    parts = _data_parts_differ(side_a, side_b)
    data_differ = (
        None
        if side_a.data_digest is None or side_b.data_digest is None
        else side_a.data_digest != side_b.data_digest
    )
    report = DiffReport(
        identical=True,
        common_step=None,
        first_differing_step=None,
        difference=None,
        data_differ=data_differ,
        a=side_a,
        b=side_b,
        data_parts_differ=parts,
    )
    # The transcripts at the steps both record: the last equal one and the first differing.
    common = sorted(set(ra.by_step) & set(rb.by_step))
    equal: list[int] = []
    differing: int | None = None
    for step in common:
        if ra.by_step[step]["state_digest"] != rb.by_step[step]["state_digest"]:
            differing = step
            break
        equal.append(step)
    end = min(side_a.last_step, side_b.last_step) if differing is None else differing
    known = equal[-1] if equal else None
    if known is not None and known == end:
        report.common_step = report.compared_step = known
        return report
    if known is None:
        return _first_states_differ(ra, rb, differing, report)
    if differing == known + 1:
        # Both transcripts record the step itself: its kept checkpoints name the difference
        # without a replay (and without the data).
        files = ra.checkpoint(differing), rb.checkpoint(differing)
        if files[0] is not None and files[1] is not None:
            found = first_difference(Trainer.load(files[0]), Trainer.load(files[1]))
            if found is not None:
                report.identical = False
                report.first_differing_step = report.compared_step = differing
                report.common_step, report.difference = known, found
                return report
    # Replay from the newest state both runs are known to share: a kept checkpoint of either
    # run at or before it (its file checked against its entry), else a fresh trainer of the
    # configuration when that is the state the runs started from.
    start: Trainer | None = None
    source = "the configuration"
    candidates = sorted(
        ((s, r) for r in (ra, rb) for s in r.by_step if s <= known), key=lambda sr: -sr[0]
    )
    for step, run in candidates:
        path = run.checkpoint(step)
        if path is None:
            continue
        try:
            t = Trainer.load(path)
        except (CheckpointError, OSError):  # a damaged or vanished file: try an older one
            continue
        if t.state_digest() == run.by_step[step]["state_digest"]:
            start, source = t, run.named(path)
            break
    if start is None:
        start = Trainer(**ra.config)
        if equal[0] != 0 or start.state_digest() != ra.by_step[0]["state_digest"]:
            raise InputError(
                f"no kept checkpoint at or before the runs' last common state (step {known}), "
                "and a fresh trainer of the configuration is not the state both runs started "
                "from: nothing to replay from"
            )
    origin = start.steps
    ta, tb = start._copy(), start._copy()
    data_a, data_b = ra.data(ta), rb.data(tb)
    report.replayed_from, report.replay_source = origin, source
    sets = data_a.dataset(ta), data_b.dataset(tb)
    while ta.steps < end:
        replay_step(ta, sets[0])
        replay_step(tb, sets[1])
        _check_entry(ta, ra, origin)
        _check_entry(tb, rb, origin)
        # The 64-bit state hash finds the step cheaply; first_difference confirms it bit by bit.
        if ta.state_hash() != tb.state_hash() or ta.steps == end:
            difference = first_difference(ta, tb)
            if difference is not None:
                report.identical = False
                report.first_differing_step = report.compared_step = ta.steps
                report.common_step = ta.steps - 1
                report.difference = difference
                report.replayed_steps = ta.steps - origin
                return report
    report.replayed_steps = ta.steps - origin
    if differing is not None:
        raise MismatchError(
            f"the replay reaches step {end} with the same state in both runs, but their "
            "transcripts record different states there: a checkpoint or transcript was changed "
            "(nxrs verify checks each run)"
        )
    report.common_step = report.compared_step = ta.steps
    return report


def _first_states_differ(
    ra: _Run, rb: _Run, differing: int | None, report: DiffReport
) -> DiffReport:
    """The runs share no recorded state: they differ at their first common step (compared by
    their kept checkpoints there, else by digest alone); InputError when they record none."""
    from nxrs._trainer import Trainer

    if differing is None:
        raise InputError(
            f"the runs record no common step (A: {sorted(ra.by_step)[:3]}..., B: "
            f"{sorted(rb.by_step)[:3]}...): nothing to compare"
        )
    report.identical = False
    report.compared_step = differing
    files = ra.checkpoint(differing), rb.checkpoint(differing)
    if files[0] is not None and files[1] is not None:
        report.difference = first_difference(Trainer.load(files[0]), Trainer.load(files[1]))
    if report.difference is None:
        da, db = (r.by_step[differing]["state_digest"] for r in (ra, rb))
        report.difference = f"state digests {da[:16]} vs {db[:16]} (no kept checkpoints there)"
    return report


def _check_entry(t: Trainer, run: _Run, origin: int) -> None:
    """A replayed state that the run's transcript records must be the recorded one."""
    entry = run.by_step.get(t.steps)
    if entry is not None and t.state_digest() != entry["state_digest"]:
        raise MismatchError(
            f"replaying run {run.label} from step {origin} on its data does not give the state "
            f"its transcript records at step {t.steps}: its data or a checkpoint is not the "
            "run's (nxrs verify checks the run)"
        )


def _diff_files(
    a: tuple[str, Path],
    b: tuple[str, Path],
    x: npt.ArrayLike | None,
    y: npt.ArrayLike | None,
    data: str | None,
    read_command: ReadCommand | None = None,
) -> DiffReport:
    from nxrs._checkpoint import open as open_checkpoint
    from nxrs._trainer import Trainer

    if (x is None) != (y is None):
        raise InputError("give the data as both x and y")
    ta, tb = Trainer.load(a[1]), Trainer.load(b[1])
    _same_config(ta.config, tb.config, (ta.config_digest(), tb.config_digest()))
    sides = []
    for (location, p), t in ((a, ta), (b, tb)):
        with open_checkpoint(p) as ck:
            fingerprint = ck.metadata.get("data_fingerprint")
        sides.append(
            DiffSide(
                path=location,
                kind="checkpoint",
                last_step=t.steps,
                state_digest=t.state_digest(),
                config_digest=t.config_digest(),
                data_fingerprint=fingerprint,
            )
        )
    fa, fb = sides[0].data_fingerprint, sides[1].data_fingerprint
    report = DiffReport(
        identical=True,
        common_step=None,
        first_differing_step=None,
        difference=None,
        data_differ=None if fa is None or fb is None else fa != fb,
        a=sides[0],
        b=sides[1],
    )
    early, late = (ta, tb) if ta.steps <= tb.steps else (tb, ta)
    if early.steps < late.steps:
        side = sides[0] if early is ta else sides[1]
        if x is not None and y is not None:
            run_data = RunData(x, y)
        elif data is not None:
            run_data = _checkpoint_data(side.path, data, read_command)
        else:
            raise InputError(
                f"the checkpoints are at different steps ({ta.steps} and {tb.steps}): give the "
                "data to replay the earlier one to the later's step (--data FILE, data=FILE: "
                "read as the earlier one's run directory read it; or in Python x, y)"
            )
        found = run_data.dataset(early).fingerprint
        if side.data_fingerprint is not None and found != side.data_fingerprint:
            raise MismatchError(
                f"the data given is not the data {side.path} was trained on (fingerprint "
                f"{found}, the checkpoint records {side.data_fingerprint})"
            )
        report.replayed_from, report.replay_source = early.steps, side.path
        report.replayed_steps = late.steps - early.steps
        replay(early, run_data, late.steps)
    report.compared_step = late.steps
    report.difference = first_difference(ta, tb)
    report.identical = report.difference is None
    if report.identical:
        report.common_step = late.steps
    return report


def _checkpoint_data(location: str, data: str, read_command: ReadCommand | None = None) -> RunData:
    """The training data of the checkpoint file at ``location``, read from the file ``data``
    as the run directory holding the checkpoint read it (``RunData.of_run`` with the manifest
    beside the file: an ``nxrs train`` run's train split; the whole file without one)."""
    from nxrs._storage.store import is_url

    directory = location.rpartition("/")[0] if is_url(location) else Path(location).parent
    manifest = open_run_directory(directory).read_manifest()
    return RunData.of_run(manifest, data, f"the run of {location}", read_command=read_command)
