"""``OnnxExportable``: ``model.export_onnx(inputs)`` on any nnx.Module that mixes it in."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import onnx
from flax import nnx

from jax2onnx_nn.core.api import to_onnx
from jax2onnx_nn.core.config import checked_options


@checked_options(to_onnx)
def export_onnx(
    module: nnx.Module,
    inputs: Sequence[Any],
    path: str | os.PathLike[str] | None = None,
    **to_onnx_options: Any,
) -> onnx.ModelProto | str:
    """Export an nnx.Module to ONNX (in inference mode unless ``training=True``).

    Args:
        module: the module; it is not changed (the export runs on a copy).
        inputs: one input spec per positional argument of ``module.__call__``, e.g.
            ``[("B", 30)]`` (see :func:`jax2onnx_nn.to_onnx`).
        path: write the model to this file (weights streamed, never copied) and return the
            path instead of the ModelProto; ``onnx.load(path)`` reads it back.
        **to_onnx_options: any option of :func:`jax2onnx_nn.to_onnx` (``opset``,
            ``auto_functions``, ``training``, ``input_names``, ...).

    Returns:
        The ``onnx.ModelProto``; with ``path``, the path written (a ``str``).

    Raises:
        TypeError: ``module`` is not an nnx.Module.
        ConversionError, SpecError: as :func:`jax2onnx_nn.to_onnx`.

    Example::

        model = MLP(30, 20, 10, rngs=nnx.Rngs(0))
        export_onnx(model, [("B", 30)], "mlp.onnx")
    """
    if not isinstance(module, nnx.Module):
        raise TypeError(f"export_onnx needs an nnx.Module, got {type(module).__name__}")
    return to_onnx(module, inputs, path=path, **to_onnx_options)


class OnnxExportable:
    """Mixin for nnx.Modules: ``model.export_onnx(inputs, path=None, **to_onnx_options)``.

    Example::

        class MLP(nnx.Module, OnnxExportable):
            ...

        onnx_model = MLP(30, 20, 10, rngs=nnx.Rngs(0)).export_onnx([("B", 30)])
    """

    def export_onnx(
        self,
        inputs: Sequence[Any],
        path: str | os.PathLike[str] | None = None,
        **to_onnx_options: Any,
    ) -> onnx.ModelProto | str:
        """Export this module; see :func:`jax2onnx_nn.flax.export_onnx`."""
        return export_onnx(self, inputs, path, **to_onnx_options)  # type: ignore[arg-type]
