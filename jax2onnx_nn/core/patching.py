"""The adapter toolkit in one import (what framework adapters build on).

* :mod:`~jax2onnx_nn.core.session`: export sessions, patches, adapter registration;
* :mod:`~jax2onnx_nn.core.calls`: a call traced over its array arguments;
* :mod:`~jax2onnx_nn.core.coarse`: coarse ops (handlers, rules, support-table rows);
* :mod:`~jax2onnx_nn.core.modules`: the module call stack (name scopes, auto functions).
"""

from jax2onnx_nn.core.calls import is_array, split_arrays, trace_call
from jax2onnx_nn.core.coarse import (
    CoarseCall,
    Handler,
    ModuleRow,
    NotApplicable,
    Operands,
    also_covers,
    bind_coarse,
    coarse_lowering,
    coarse_wrapper,
    describe_module,
    map_calls,
    module_rows,
)
from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.modules import ModuleCallStack, overrides_nothing
from jax2onnx_nn.core.session import (
    Prepared,
    active_options,
    add_session_patch,
    export_session,
    patch,
    patches,
    register_adapter,
)

ExportOptions = ExportConfig  # the name adapters used before the one export config

__all__ = [
    "CoarseCall",
    "ExportConfig",
    "ExportOptions",
    "Handler",
    "ModuleCallStack",
    "ModuleRow",
    "NotApplicable",
    "Operands",
    "Prepared",
    "active_options",
    "add_session_patch",
    "also_covers",
    "bind_coarse",
    "coarse_lowering",
    "coarse_wrapper",
    "describe_module",
    "export_session",
    "is_array",
    "map_calls",
    "module_rows",
    "overrides_nothing",
    "patch",
    "patches",
    "register_adapter",
    "split_arrays",
    "trace_call",
]
