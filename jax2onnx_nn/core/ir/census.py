"""What a rewrite acts on: the one declaration of the op types a pass or a target rewrite
rewrites, and a model's op census, so that a rewrite with nothing to act on is not run."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import onnx_ir as ir

from jax2onnx_nn.core.ir.walk import all_nodes

F = TypeVar("F", bound=Callable[..., Any])


def rewrite(*op_types: str, domain: str = "", creates: Iterable[str] = ()) -> Callable[[F], F]:
    """Declare the op types (of ``domain``, the default one unless given) a rewrite acts on,
    and the op types it may add (``creates``).

    For a pass (a function of the model) :func:`run_if_present` skips it on a model whose
    :func:`op_census` holds none of ``op_types``. For a target rewrite (a function of one node
    and an :class:`~jax2onnx_nn.core.ir.edit.Editor`), the driver calls it only on nodes of
    those types and domain, none given: every node of the domain. The reason a rewrite exists
    is its docstring, and nowhere else."""

    def declare(fn: F) -> F:
        declared: Any = fn
        declared.op_types, declared.domain = frozenset(op_types), domain
        declared.creates = frozenset(creates)
        return fn

    return declare


def acts_on(fn: Any, node: ir.Node) -> bool:
    """Whether a rewrite declared with :func:`rewrite` acts on ``node``'s op type and domain."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    return domain == fn.domain and (not fn.op_types or node.op_type in fn.op_types)


def may_act(fn: Any, census: set[str]) -> bool:
    """Whether a rewrite declared with :func:`rewrite` may find a node to act on in a model of
    op ``census``: one of its op types is there (always, for none declared or another domain)."""
    return not (fn.op_types and fn.domain == "" and census.isdisjoint(fn.op_types))


def op_census(model: ir.Model) -> set[str]:
    """The op types of the default domain anywhere in ``model`` (main graph, bodies, function
    bodies), in one walk: what the rewrites declared with :func:`rewrite` are asked against,
    instead of each walking the whole model to find nothing to do."""
    return {n.op_type for n, _ in all_nodes(model) if n.domain in ("", "ai.onnx")}


def run_if_present(pass_: Any, model: ir.Model, census: set[str]) -> Any:
    """``pass_(model)`` when the model holds an op type it rewrites (else None, nothing
    walked); the op types it may add join ``census``, which stays a superset of the
    model's op types while passes only remove, move or add declared ones."""
    if census.isdisjoint(pass_.op_types):
        return None
    census |= pass_.creates
    return pass_(model)
