import importlib.util

# Without keras installed, skip this directory (tests/conftest.py picks the JAX backend).
if importlib.util.find_spec("keras") is None:
    collect_ignore_glob = ["test_*.py"]
