"""What every module of the package may use (``docs/ARCHITECTURE.md``, layer 1): argument
checks, crash-safe files and strict JSON, the configuration schema, the cache directory, stop
signals, the progress bar. It imports nothing of nxrs but the compiled core."""
