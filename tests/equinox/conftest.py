import importlib.util

# The 3.12 test environment has no equinox: skip this directory there.
if importlib.util.find_spec("equinox") is None:
    collect_ignore_glob = ["test_*.py"]
