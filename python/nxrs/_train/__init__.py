"""Training (``docs/ARCHITECTURE.md``, layer 5): ``Trainer.fit``'s checks and loop (``fit``),
the run directory during a fit (``session``), the Ray engine (``distributed``). Below the
Trainer: these modules are handed a trainer (or its class) and never import it."""
