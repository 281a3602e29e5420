"""The CLI's exit codes, shared by ``__main__`` (the CLI) and ``demo`` (``jax2onnx-nn demo``)."""

OK, MISMATCH, USAGE, EXPORT_FAILED = 0, 1, 2, 3
NOT_FOUND = 1  # ``ops PATTERN`` matching nothing
MISSING_EXTRA = 4  # ``--verify`` / ``demo`` without onnxruntime installed
INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as shells report it
