"""The formats of ``nxrs.interop``, one module each (below the Trainer: the functions that
build a trainer take its class)."""
