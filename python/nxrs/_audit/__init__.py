"""Auditing runs (``docs/ARCHITECTURE.md``, layer 7, on top of the Trainer): replaying a run
(``replay``), ``nxrs.verify`` (``verify``, ``verify_records``, ``verify_replays``),
``nxrs.diff``, ``nxrs inspect`` (``inspection``) and the gate."""
