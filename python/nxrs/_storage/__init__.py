"""The object stores (``docs/ARCHITECTURE.md``, layer 2): a directory of objects with
conditional writes (``store``), and a backend per store (``s3``, ``gcs``, ``azure``). They know
nothing of runs."""
