import importlib.util

# The 3.12 test environment has no flax: skip this directory there.
if importlib.util.find_spec("flax") is None:
    collect_ignore_glob = ["test_*.py"]
