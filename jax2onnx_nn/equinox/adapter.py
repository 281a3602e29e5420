"""The Equinox side of an export session (see ``core/patching.py``).

For the duration of one export: the coarse-op patches of ``coarse/`` are applied (each
Equinox layer call becomes one coarse ONNX op where the call is modelled); the modules the
exported callable holds are replaced by copies in inference mode (``eqx.nn.inference_mode``;
training mode if asked), so the user's modules are never changed; their arrays are named by
pytree path (``layers.0.weight``); and module calls get name scopes (and ONNX functions with
``auto_functions``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.patching import Prepared, patches
from jax2onnx_nn.equinox import coarse, flags, primitives
from jax2onnx_nn.equinox.functions import ModulePaths, module_call_classes
from jax2onnx_nn.equinox.modules import array_names, export_copy, retarget

primitives.register_rules()


@contextlib.contextmanager
def export_session(prepared: Prepared, options: ExportConfig) -> Iterator[Prepared]:
    with contextlib.ExitStack() as stack:
        stack.enter_context(patches(primitives.patches()))
        if options.coarse_ops:
            stack.enter_context(patches(coarse.patches()))
        stack.enter_context(patches(flags.patches()))  # outside the coarse ops: runtime flags
        fn, roots = retarget(prepared.fn, lambda tree: export_copy(tree, options.training))
        if not roots:
            yield prepared
            return
        paths = ModulePaths()
        paths.index(roots)
        stack.enter_context(paths.scoped_calls(module_call_classes(roots)))
        yield Prepared(fn, {**array_names(roots), **prepared.const_names})
