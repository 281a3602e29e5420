"""``jax.nn`` functions as coarse ONNX ops, in every export (with or without a framework).

While an export runs, the activations of ``jax.nn`` (``relu``, ``gelu``, ``softmax``, ...) and
``jax.nn.dot_product_attention`` are patched: a call the table models binds one coarse
primitive, lowered to one ONNX op (``Relu``, ``Gelu``, ``Softmax``) or the attention core
(MatMul / Softmax / MatMul), and any other call (an unknown keyword, a dtype onnxruntime has no
exact kernel for, ``where=``) runs the original and is lowered op by op.

Functions captured before the export (``eqx.nn.MLP(activation=jax.nn.gelu)``,
``self.act = nnx.relu``) are not reached through the namespace: adapters swap them for the
patched version on the export's own copy of the model with
:func:`~jax2onnx_nn.core.jax_nn.namespaces.substitute`. One patched function serves every
namespace an original is reachable through (``nnx.relu is jax.nn.relu``).

``activations.py`` holds the table and the activations' rule, ``attention.py`` the attention's,
``namespaces.py`` the patches of a namespace, ``in_place.py`` the activations reached by
another name (patched in place, or recognized as a jitted call). This package is the adapter
of ``jax.nn`` (see ``core/session.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.jax_nn import in_place, namespaces
from jax2onnx_nn.core.session import Prepared, patches, register_adapter


@contextlib.contextmanager
def export_session(prepared: Prepared, options: ExportConfig) -> Iterator[Prepared]:
    """The adapter of ``jax.nn`` (see ``core/session.py``): its patches, for every export
    (an exported ``jax.nn.gelu`` itself is one of the captured functions)."""
    if not options.coarse_ops:
        yield prepared
        return
    with contextlib.ExitStack() as stack:
        stack.callback(namespaces.clear_patched)
        stack.enter_context(in_place.activations_patched_in_place())
        stack.enter_context(patches(namespaces.namespace_patches(jax.nn)))
        yield Prepared(namespaces.substitute(prepared.fn), prepared.const_names)


register_adapter("jax", __name__)  # its patches apply to every export

__all__ = ["export_session"]
