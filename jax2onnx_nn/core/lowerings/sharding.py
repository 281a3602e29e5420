"""``shard_map`` as the global computation it describes, on one device.

A ``shard_map`` body runs once per device of a mesh on a block of each global array, and its
collectives (``psum``, ``all_gather``, ``ppermute``, ...) move data between the devices. The
exported graph computes what the whole mesh computes: the body is run over *device-stacked*
values, arrays with a leading dim of one entry per device (``[D, *local]``, the devices in
row-major mesh order), or a single array where a value is the same on every device (a
replicated weight: its ops run once, not D times). Ordinary equations run under ``jax.vmap``
over the device dim; each collective is the reduction, gather or permutation it performs over
that dim; bodies that contain collectives (``scan``, ``cond``, ``while``, calls) are run the
same way, step by step. The result is traced into one jaxpr over the global arrays and
lowered like any other: no per-device copy of the body, no JAX collective batching rules
(which differ between JAX versions).

Sharding annotations (``with_sharding_constraint``, ``reshard``, ``device_put``, ``pvary``,
``mesh_cast``) change where values live, not what they are: they lower to nothing
(``core/lowerings/elementwise.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.registry import builtin_rules, register


@dataclass(frozen=True)
class Mesh:
    """The manual axes of a shard_map's mesh: names in mesh order and their sizes."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def devices(self) -> int:
        return math.prod(self.sizes)

    def position(self, name: str) -> int:
        return self.names.index(name)


@dataclass(frozen=True)
class Stacked:
    """A body value: ``[D, *local]`` per device, or ``local`` when it is the same on all."""

    value: Any
    per_device: bool


def _axis_names(names: Any) -> tuple[str, ...]:
    return tuple(names) if isinstance(names, (tuple, list)) else (names,)


def _dim_axes(spec: Any, ndim: int) -> list[tuple[str, ...]]:
    """The mesh axes each dim of an array is split over, from a PartitionSpec (or the
    ``{dim: axes}`` dict older JAX versions keep)."""
    if isinstance(spec, dict):
        return [tuple(spec.get(d, ())) for d in range(ndim)]
    entries = list(spec) + [None] * (ndim - len(spec))
    return [() if e is None else _axis_names(e) for e in entries[:ndim]]


# -- device-stacked values --------------------------------------------------------------------


def _per_device(x: Stacked, mesh: Mesh) -> Any:
    """``[D, *local]``, broadcast if the value is the same on every device."""
    if x.per_device:
        return x.value
    return jnp.broadcast_to(x.value, (mesh.devices, *jnp.shape(x.value)))


def _grid(x: Stacked, mesh: Mesh) -> Any:
    """``[n_1, ..., n_k, *local]``: one dim per mesh axis."""
    value = _per_device(x, mesh)
    return value.reshape(mesh.sizes + value.shape[1:])


def _from_grid(grid: Any, mesh: Mesh) -> Stacked:
    return Stacked(grid.reshape((mesh.devices, *grid.shape[len(mesh.sizes) :])), True)


def _front(grid: Any, mesh: Mesh, names: tuple[str, ...]) -> tuple[Any, list[str]]:
    """The grid with the other mesh axes first (mesh order), then ``names`` merged into one
    dim (row-major in ``names``' order, as collectives number the devices), then the local
    dims; and the other axes' names."""
    others = [a for a in mesh.names if a not in names]
    perm = [mesh.position(a) for a in others] + [mesh.position(a) for a in names]
    k = len(mesh.names)
    moved = jnp.transpose(grid, perm + list(range(k, grid.ndim)))
    group = math.prod(mesh.sizes[mesh.position(a)] for a in names)
    return moved.reshape((*moved.shape[: len(others)], group, *moved.shape[k:])), others


def _back(value: Any, mesh: Mesh, others: list[str], names: tuple[str, ...]) -> Stacked:
    """Inverse of :func:`_front`: ``[others..., G, *local]`` with G over ``names`` back to the
    mesh order."""
    o = len(others)
    split = value.reshape(
        (*value.shape[:o], *(mesh.sizes[mesh.position(a)] for a in names), *value.shape[o + 1 :])
    )
    order = others + list(names)
    perm = [order.index(a) for a in mesh.names]
    k = len(mesh.names)
    return _from_grid(jnp.transpose(split, perm + list(range(k, split.ndim))), mesh)


def _spread(value: Any, mesh: Mesh, others: list[str]) -> Stacked:
    """A value ``[others..., *local]`` that is the same along the remaining mesh axes."""
    if not others:
        return Stacked(value, False)
    # the others' dims are in mesh order (as _front leaves them): size-1 dims go in between
    shape = tuple(mesh.sizes[mesh.position(a)] if a in others else 1 for a in mesh.names)
    local = value.shape[len(others) :]
    return _from_grid(jnp.broadcast_to(value.reshape(shape + local), mesh.sizes + local), mesh)


# -- collectives over the device dim ----------------------------------------------------------


def _whole_axes(axis_index_groups: Any) -> None:
    """Refuse a collective over groups of an axis's devices: the export computes over all."""
    if axis_index_groups is not None:
        raise NotImplementedError(
            f"axis_index_groups={axis_index_groups} is not supported: the export "
            "computes collectives over every device of the named axes; split the mesh axis "
            "into two named axes and reduce over the inner one instead"
        )


# Each collective names the params JAX binds it with (psum and all_gather name the union of
# theirs and their _invariant / psum2 forms'): a param a JAX version adds fails here, by name.
def _reduce(reducer: Callable[..., Any], scale: bool) -> Callable[..., list[Stacked]]:
    def collective(
        mesh: Mesh, x: Stacked, *, axes: Any, axis_index_groups: Any = None
    ) -> list[Stacked]:
        _whole_axes(axis_index_groups)
        names = _axis_names(axes)
        group = math.prod(mesh.sizes[mesh.position(a)] for a in names)
        if group == 1:
            return [x]
        if not x.per_device:  # the same value on every device of the group
            return [Stacked(x.value * group if scale else x.value, False)]
        grid, others = _front(_grid(x, mesh), mesh, names)
        return [_spread(reducer(grid, axis=len(others)), mesh, others)]

    return collective


def _all_gather(
    mesh: Mesh,
    x: Stacked,
    *,
    axis_name: Any,
    all_gather_dimension: int,
    tiled: bool,
    axis_size: int,
    axis_index_groups: Any = None,
) -> list[Stacked]:
    del axis_size  # the group's size: the mesh's sizes of axis_name give it
    _whole_axes(axis_index_groups)
    names = _axis_names(axis_name)
    grid, others = _front(_grid(x, mesh), mesh, names)
    o = len(others)
    gathered = jnp.moveaxis(grid, o, o + all_gather_dimension)
    if tiled:  # the blocks one after another along the dim
        shape = gathered.shape
        d = o + all_gather_dimension
        gathered = gathered.reshape((*shape[:d], shape[d] * shape[d + 1], *shape[d + 2 :]))
    return [_spread(gathered, mesh, others)]


def _reduce_scatter(
    mesh: Mesh,
    x: Stacked,
    *,
    axis_name: Any,
    scatter_dimension: int,
    tiled: bool,
    axis_size: int,
    axis_index_groups: Any,
) -> list[Stacked]:
    del axis_size  # the group's size: the mesh's sizes of axis_name give it
    _whole_axes(axis_index_groups)
    names = _axis_names(axis_name)
    grid, others = _front(_grid(x, mesh), mesh, names)
    o = len(others)
    total = jnp.sum(grid, axis=o)  # [others..., *local]
    group = grid.shape[o]
    d = o + scatter_dimension
    shape = total.shape
    blocks = (
        total.reshape((*shape[:d], group, shape[d] // group, *shape[d + 1 :])) if tiled else total
    )
    if not tiled:
        blocks = jnp.expand_dims(blocks, d + 1)
    scattered = jnp.moveaxis(blocks, d, o)
    if not tiled:
        scattered = jnp.squeeze(scattered, d + 1)
    return [_back(scattered, mesh, others, names)]


def _all_to_all(
    mesh: Mesh,
    x: Stacked,
    *,
    axis_name: Any,
    split_axis: int,
    concat_axis: int,
    tiled: bool,
    axis_index_groups: Any,
) -> list[Stacked]:
    # the primitive is always tiled: lax.all_to_all adds and removes the dims of tiled=False
    del tiled
    _whole_axes(axis_index_groups)
    names = _axis_names(axis_name)
    grid, others = _front(_grid(x, mesh), mesh, names)
    o = len(others)
    group = grid.shape[o]
    shape = grid.shape
    s = o + 1 + split_axis
    chunks = grid.reshape((*shape[:s], group, shape[s] // group, *shape[s + 1 :]))
    received = jnp.moveaxis(chunks, s, o)  # [others, to, from, *local (split dim / G)]
    c = o + 1 + concat_axis
    received = jnp.moveaxis(received, o + 1, c)  # the senders just before the concat dim
    shape = received.shape
    merged = received.reshape((*shape[:c], shape[c] * shape[c + 1], *shape[c + 2 :]))
    return [_back(merged, mesh, others, names)]


def _ppermute(
    mesh: Mesh, x: Stacked, *, axis_name: Any, perm: Sequence[tuple[int, int]]
) -> list[Stacked]:
    names = _axis_names(axis_name)
    grid, others = _front(_grid(x, mesh), mesh, names)
    o = len(others)
    group = grid.shape[o]
    source = np.zeros(group, np.int32)
    receives = np.zeros(group, bool)
    for src, dst in perm:
        source[dst], receives[dst] = src, True
    moved = jnp.take(grid, jnp.asarray(source), axis=o)
    if not receives.all():  # devices no one sends to get zeros
        mask = receives.reshape((group,) + (1,) * (grid.ndim - o - 1))
        moved = jnp.where(mask, moved, jnp.zeros((), grid.dtype))
    return [_back(moved, mesh, others, names)]


def _pbroadcast(mesh: Mesh, x: Stacked, *, axis_name: Any, source: int) -> list[Stacked]:
    names = _axis_names(axis_name)
    grid, others = _front(_grid(x, mesh), mesh, names)
    return [_spread(jnp.take(grid, source, axis=len(others)), mesh, others)]


def _axis_index(mesh: Mesh, *, axis_name: Any) -> list[Stacked]:
    names = _axis_names(axis_name)
    if mesh.devices == 1:
        return [Stacked(jnp.zeros((), np.int32), False)]
    index = np.zeros(mesh.sizes, np.int32)
    for name in names:  # row-major over the named axes
        n = mesh.sizes[mesh.position(name)]
        index = index * n + np.indices(mesh.sizes, np.int32)[mesh.position(name)]
    return [Stacked(jnp.asarray(index.reshape(-1)), True)]


def _identity(mesh: Mesh, *xs: Stacked, axes: Any) -> list[Stacked]:
    del axes  # (pvary) the axes a value starts to vary along: a value per device already does
    return list(xs)


COLLECTIVES: dict[str, Callable[..., list[Stacked]]] = {
    "psum": _reduce(jnp.sum, True),
    "psum_invariant": _reduce(jnp.sum, True),
    "psum2": _reduce(jnp.sum, True),
    "pmax": _reduce(jnp.max, False),
    "pmin": _reduce(jnp.min, False),
    "all_gather": _all_gather,
    "all_gather_invariant": _all_gather,
    "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all,
    "ppermute": _ppermute,
    "pbroadcast": _pbroadcast,
    "axis_index": _axis_index,
    "pvary": _identity,
}


# -- the body over device-stacked values ------------------------------------------------------


def _has_collectives(jaxpr: Any) -> bool:
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in COLLECTIVES:
            return True
        if any(_has_collectives(sub) for sub in jxi.subjaxprs_of(eqn.params)):
            return True
    return False


def run_body(closed: Any, mesh: Mesh, args: Sequence[Stacked]) -> list[Stacked]:
    """Evaluate a shard_map body (or a body inside it) on device-stacked values."""
    closed = jxi.as_closed(closed)
    jaxpr = closed.jaxpr
    env: dict[Any, Stacked] = {}

    def read(atom: Any) -> Stacked:
        if jxi.is_literal(atom):
            return Stacked(jxi.literal_value(atom), False)
        return env[atom]

    for var, const in zip(jaxpr.constvars, closed.consts, strict=True):
        env[var] = Stacked(const, False)
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        outs = _run_eqn(eqn, mesh, [read(a) for a in eqn.invars])
        for var, value in zip(eqn.outvars, outs, strict=True):
            env[var] = value
    return [read(a) for a in jaxpr.outvars]


def _run_eqn(eqn: Any, mesh: Mesh, args: list[Stacked]) -> list[Stacked]:
    name = eqn.primitive.name
    if name in COLLECTIVES:
        try:
            return COLLECTIVES[name](mesh, *args, **eqn.params)
        except NotImplementedError as e:
            raise NotImplementedError(
                f"{name}: {e} (at {jxi.source_line(eqn, library_ok=True)})"
            ) from None
    subs = jxi.subjaxprs_of(eqn.params)
    if not any(_has_collectives(sub) for sub in subs):
        return _mapped(eqn, mesh, args)
    if name == "scan":
        return _scan(eqn, mesh, args)
    if name == "cond":
        return _cond(eqn, mesh, args)
    if name == "while":
        return _while(eqn, mesh, args)
    if name in _CALLS:
        return run_body(eqn.params[_CALLS[name]], mesh, args)
    if jxi.is_body_primitive(eqn.primitive):  # a coarse op (core/coarse.py): its traced body
        return run_body(eqn.params["body"], mesh, args)
    raise NotImplementedError(
        f"its body has collectives inside a {name} (at {jxi.source_line(eqn, library_ok=True)}); "
        "collectives can be exported inside scan, "
        "cond, while_loop and calls (jit, checkpoint, custom_jvp/vjp): move them out of the "
        f"{name}, or register a lowering for shard_map (jax2onnx_nn.lowering) that computes it"
    )


_CALLS = {
    "pjit": "jaxpr",
    "jit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "remat": "jaxpr",
    "checkpoint": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
}


def _mapped(eqn: Any, mesh: Mesh, args: list[Stacked]) -> list[Stacked]:
    """An equation without collectives: once if no input differs between devices, else
    vmapped over the device dim."""
    bind = lambda *xs: jxi.bind_equation(eqn, xs)  # noqa: E731
    if not any(a.per_device for a in args):
        return [Stacked(v, False) for v in bind(*(a.value for a in args))]
    in_axes = [0 if a.per_device else None for a in args]
    outs = jax.vmap(bind, in_axes=in_axes, axis_size=mesh.devices)(*(a.value for a in args))
    return [Stacked(v, True) for v in outs]


def _scan(eqn: Any, mesh: Mesh, args: list[Stacked]) -> list[Stacked]:
    p = eqn.params
    n_consts, n_carry = jxi.scan_counts(p)
    consts, carry, xs = (
        args[:n_consts],
        args[n_consts : n_consts + n_carry],
        args[n_consts + n_carry :],
    )
    xs_flags = [x.per_device for x in xs]
    # per device, the scanned dim comes after the device dim: scan over it first
    xs_values = [jnp.moveaxis(x.value, 1, 0) if x.per_device else x.value for x in xs]

    def step(state: list[Any], x_slices: list[Any]) -> tuple[list[Any], list[Any]]:
        xs_in = [Stacked(v, f) for v, f in zip(x_slices, xs_flags, strict=True)]
        outs = run_body(p["jaxpr"], mesh, [*consts, *(Stacked(s, True) for s in state), *xs_in])
        return (
            [_per_device(o, mesh) for o in outs[:n_carry]],
            [_per_device(o, mesh) for o in outs[n_carry:]],
        )

    final, ys = lax.scan(
        step,
        [_per_device(c, mesh) for c in carry],
        xs_values,
        length=p["length"],
        reverse=p["reverse"],
    )
    return [Stacked(c, True) for c in final] + [Stacked(jnp.moveaxis(y, 0, 1), True) for y in ys]


def _cond(eqn: Any, mesh: Mesh, args: list[Stacked]) -> list[Stacked]:
    index, operands = args[0], args[1:]
    branches = eqn.params["branches"]
    if not index.per_device:

        def branch(closed: Any) -> Callable[..., list[Any]]:
            return lambda *_: [_per_device(o, mesh) for o in run_body(closed, mesh, operands)]

        return [Stacked(v, True) for v in lax.switch(index.value, [branch(b) for b in branches])]
    results = [[_per_device(o, mesh) for o in run_body(b, mesh, operands)] for b in branches]
    chosen = jnp.clip(index.value, 0, len(branches) - 1)
    outs = []
    for values in zip(*results, strict=True):
        mask = chosen.reshape((-1,) + (1,) * (values[0].ndim - 1))
        outs.append(
            Stacked(jnp.select([mask == i for i in range(len(values))], list(values)), True)
        )
    return outs


def _while(eqn: Any, mesh: Mesh, args: list[Stacked]) -> list[Stacked]:
    p = eqn.params
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    cond_consts, body_consts, init = args[:nc], args[nc : nc + nb], args[nc + nb :]

    def going(state: list[Any]) -> Any:
        (pred,) = run_body(
            p["cond_jaxpr"], mesh, [*cond_consts, *(Stacked(s, True) for s in state)]
        )
        return _per_device(pred, mesh)

    def body(state: list[Any]) -> list[Any]:
        # devices whose condition is false keep their state while the others go on
        on = going(state)
        new = run_body(p["body_jaxpr"], mesh, [*body_consts, *(Stacked(s, True) for s in state)])
        return [
            jnp.where(on.reshape((-1,) + (1,) * (s.ndim - 1)), _per_device(n, mesh), s)
            for n, s in zip(new, state, strict=True)
        ]

    final = lax.while_loop(lambda s: jnp.any(going(s)), body, [_per_device(a, mesh) for a in init])
    return [Stacked(v, True) for v in final]


# -- global arrays <-> per-device blocks ------------------------------------------------------


def _to_blocks(x: Any, spec: Any, mesh: Mesh) -> Stacked:
    axes = _dim_axes(spec, x.ndim)
    if not any(axes) or mesh.devices == 1:
        return Stacked(x, False)
    shape: list[int] = []
    labels: list[str | None] = []
    for d, names in enumerate(axes):
        for name in names:
            shape.append(mesh.sizes[mesh.position(name)])
            labels.append(name)
        shape.append(x.shape[d] // math.prod(mesh.sizes[mesh.position(a)] for a in names))
        labels.append(None)
    split = x.reshape(shape)
    present = [a for a in mesh.names if a in labels]
    perm = [labels.index(a) for a in present] + [
        i for i, label in enumerate(labels) if label is None
    ]
    blocks = jnp.transpose(split, perm)
    local = blocks.shape[len(present) :]
    grid_shape = tuple(
        n if a in present else 1 for a, n in zip(mesh.names, mesh.sizes, strict=True)
    )
    grid = jnp.broadcast_to(blocks.reshape(grid_shape + local), mesh.sizes + local)
    return _from_grid(grid, mesh)


def _from_blocks(x: Stacked, spec: Any, mesh: Mesh, ndim: int) -> Any:
    axes = _dim_axes(spec, ndim)
    if not any(axes) and not x.per_device:
        return x.value
    grid = _grid(x, mesh)
    used = [a for names in axes for a in names]
    # a replicated axis of the output: every device holds the same value, take the first's
    picked = grid[tuple(slice(None) if a in used else 0 for a in mesh.names)]
    kept = [a for a in mesh.names if a in used]
    perm = []
    for d, names in enumerate(axes):
        perm += [kept.index(a) for a in names]
        perm.append(len(kept) + d)
    ordered = jnp.transpose(picked, perm)
    shape, at = [], 0
    for names in axes:
        shape.append(math.prod(ordered.shape[at : at + len(names) + 1]))
        at += len(names) + 1
    return ordered.reshape(shape)


def global_function(params: dict[str, Any]) -> Callable[..., list[Any]]:
    """The shard_map of ``params`` as a function of the global arrays."""
    mesh_obj = params["mesh"]
    manual = params.get("newly_manual_axes", params.get("manual_axes", params.get("axis_names")))
    names = tuple(a for a in mesh_obj.axis_names if manual is None or a in manual)
    mesh = Mesh(names, tuple(int(dict(mesh_obj.shape)[a]) for a in names))
    in_specs = params["in_specs"] if "in_specs" in params else params["in_names"]
    out_specs = params["out_specs"] if "out_specs" in params else params["out_names"]
    body = params["jaxpr"]
    out_ndims = [v.aval.ndim for v in jxi.as_closed(body).jaxpr.outvars]

    def run(*xs: Any) -> list[Any]:
        blocks = [_to_blocks(x, spec, mesh) for x, spec in zip(xs, in_specs, strict=True)]
        outs = run_body(body, mesh, blocks)
        return [
            _from_blocks(o, spec, mesh, nd)
            for o, spec, nd in zip(outs, out_specs, out_ndims, strict=True)
        ]

    return run


def _shard_map(ctx: LoweringContext, *args: ir.Value, **params: Any) -> list[ir.Value]:
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ctx.avals_in]
    try:
        closed = jax.make_jaxpr(global_function(params))(*specs)
    except NotImplementedError as err:
        where = ctx.source_line or ctx.builder.doc_string or "<unknown location>"
        raise NotImplementedError(f"shard_map at {where}: {err}") from None
    return ctx.lower_sub(closed, args)


with builtin_rules():
    register("shard_map", _shard_map, onnx_ops=())
