"""scripts/gen_runtime_table.py loaded as a module, for the tests that share its model cases
(the runtime matrix, the TensorRT profile)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    name = "gen_runtime_table"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "gen_runtime_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (its dataclass looks its module up there)
    spec.loader.exec_module(module)
    return module


GEN = _load()
