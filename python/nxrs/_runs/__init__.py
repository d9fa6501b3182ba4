"""Run directories (``docs/ARCHITECTURE.md``, layer 4): their file names and errors, the
manifest, the lock and the lease, the transcript, the checkpoints and background saves."""
