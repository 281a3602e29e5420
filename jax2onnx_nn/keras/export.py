"""``export_onnx(model)``: a Keras 3 model exported as Keras's ``model.export(format="onnx")``
would, with every option of :func:`~jax2onnx_nn.to_onnx`.

The input signature comes from the model (a functional or Sequential model's inputs, a
subclassed model's built input shapes, or ``input_signature=``); each ``None`` dim becomes a
symbolic dim: the batch of every input is ``batch``, another is named after its input and axis
(``token_ids_1``). Dims the model needs equal get one name, and bounds it assumes become
constraints (:func:`infer_dims`), so a keras-hub backbone exports with batch and sequence
symbolic and no signature given.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import jax
import keras
import numpy as np
import onnx

from jax2onnx_nn.core.api import to_onnx
from jax2onnx_nn.core.config import checked_options
from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.core.specs import parse_specs
from jax2onnx_nn.core.verify import verify as verify_export
from jax2onnx_nn.keras.adapter import in_mode

_BATCH = "batch"
_MADE_UP = re.compile(r"keras_tensor(_\d+)?")
_BOUNDS_PER_DIM = 4  # bounds of one dim assumed before the remaining error is the user's


@dataclass(frozen=True)
class InputLeaf:
    """One graph input: its name, dtype and dims (ints, or names of symbolic dims)."""

    name: str
    dims: tuple[int | str, ...]
    dtype: str

    def shape(self, sizes: dict[str, int]) -> tuple[int, ...]:
        """The shape with every symbolic dim at its size in ``sizes``."""
        return tuple(sizes[d] if isinstance(d, str) else d for d in self.dims)

    def spec(self, rename: dict[str, str]) -> jax.ShapeDtypeStruct:
        dims = tuple(rename.get(d, d) if isinstance(d, str) else d for d in self.dims)
        return jax.ShapeDtypeStruct(dims, np.dtype(self.dtype))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Bound:
    """A bound ``dim <= size`` (``upper``) or ``dim >= size`` the model assumes."""

    dim: str
    upper: bool
    size: int

    def constraint(self, rename: dict[str, str]) -> str:
        return f"{rename.get(self.dim, self.dim)} {'<=' if self.upper else '>='} {self.size}"


@dataclass(frozen=True)
class Signature:
    """A model's positional arguments as pytrees of :class:`InputLeaf`, the dims found equal
    (``rename``: a dim name -> the name it shares) and the bounds found."""

    args: tuple[Any, ...]
    rename: dict[str, str]
    bounds: tuple[Bound, ...] = ()

    def specs(self) -> list[Any]:
        return [_map_leaves(lambda leaf: leaf.spec(self.rename), arg) for arg in self.args]

    def input_names(self) -> list[str]:
        return [leaf.name for leaf in _leaves(self.args)]

    def dim_names(self) -> list[str]:
        """The symbolic dims of the inputs (after unification), in the order the model declares
        its inputs (a dict's insertion order: ``token_ids`` before ``padding_mask``)."""
        names = [
            self.rename.get(d, d)
            for leaf in _declared(self.args)
            for d in leaf.dims
            if isinstance(d, str)
        ]
        return list(dict.fromkeys(names))

    def constraints(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.constraint(self.rename) for b in self.bounds))


def _declared(tree: Any) -> list[InputLeaf]:
    if isinstance(tree, InputLeaf):
        return [tree]
    values = tree.values() if isinstance(tree, dict) else tree
    return [leaf for value in values for leaf in _declared(value)]


def _is_leaf(value: Any) -> bool:
    return isinstance(value, InputLeaf)


def _map_leaves(fn: Callable[[InputLeaf], Any], tree: Any) -> Any:
    return jax.tree_util.tree_map(fn, tree, is_leaf=_is_leaf)


def _leaves(tree: Any) -> list[InputLeaf]:
    """The leaves in the order JAX flattens them (dicts by sorted key), as the graph's inputs."""
    return list(jax.tree_util.tree_leaves(tree, is_leaf=_is_leaf))


# -- the signature ----------------------------------------------------------------------------


def model_signature(model: Any, input_signature: Any = None) -> Signature:
    """The model's positional arguments as :class:`InputLeaf` pytrees, ``None`` dims named.

    ``input_signature``: as Keras's ``model.export`` takes it, one spec (``keras.InputSpec``,
    ``keras.KerasTensor``, ``jax.ShapeDtypeStruct``, an array) or a pytree of specs per positional
    argument; a single spec is the one argument.

    Raises:
        SpecError: the model has no known inputs (a subclassed model never called or built), or
            a spec has no shape or dtype.
    """
    if input_signature is None:
        args = _model_inputs(model)
    elif isinstance(input_signature, (list, tuple)):
        args = tuple(input_signature)
    else:
        args = (input_signature,)
    leaves = _named_leaves(args, model)
    return Signature(leaves, {})


def _model_inputs(model: Any) -> tuple[Any, ...]:
    """The structure Keras's own export reads: a functional model's ``_inputs_struct`` (one
    argument: a tensor, list or dict), a Sequential model's input, a subclassed model's input
    shapes recorded when it was built or first called."""
    if isinstance(model, keras.Sequential):
        if getattr(model, "_functional", None) is not None or _built_inputs(model):
            return tuple(model.inputs)
    elif isinstance(model, keras.Model) and hasattr(model, "_inputs_struct"):
        return (model._inputs_struct,)
    shapes = getattr(model, "_build_shapes_dict", None)
    if shapes:
        dtype = getattr(model, "input_dtype", None) or "float32"
        required, params = _call_arguments(model)
        if len(shapes) < len(required):
            raise SpecError(
                f"{type(model).__name__} {model.name!r} recorded the input shape of "
                f"{len(shapes)} of the {len(required)} arguments of its call() "
                f"({', '.join(required)}): Keras records the first argument only; pass "
                f"input_signature with one spec per argument, e.g. "
                f"[keras.InputSpec(shape=(None, 8), dtype='float32'), ...]"
            )
        keys = [key.removesuffix("_shape") for key in shapes]  # (input_shape: Keras's word)
        names = [params[i] if i < len(params) else key for i, key in enumerate(keys)]
        return tuple(
            _shape_specs(value, dtype, name)
            for name, value in zip(names, shapes.values(), strict=True)
        )
    raise SpecError(
        f"{type(model).__name__} {getattr(model, 'name', '')!r} has no known inputs (a subclassed "
        "model that was never called or built, or a Sequential model without keras.Input): call it "
        "once on an example batch, build it (model.build((None, 8))), or pass "
        "input_signature=[keras.InputSpec(shape=(None, 8), dtype='float32')] with one spec per "
        "argument of its call()"
    )


def _call_arguments(model: Any) -> tuple[list[str], list[str]]:
    """The names of ``model.call``'s positional arguments without a default, and of all of
    them (``training`` and ``mask`` left out: Keras passes them itself)."""
    try:
        parameters = inspect.signature(model.call).parameters.values()
    except (TypeError, ValueError):
        return [], []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in parameters if p.kind in kinds and p.name not in ("training", "mask")]
    return [p.name for p in positional if p.default is p.empty], [p.name for p in positional]


def _built_inputs(model: Any) -> bool:
    try:
        return bool(model.inputs)
    except (AttributeError, ValueError):
        return False


def _shape_specs(value: Any, dtype: str, name: str) -> Any:
    """A recorded build shape (a tuple of ints / None, or a dict / list of them) as InputSpecs
    named after the call argument, the batch dim left open as Keras's export does."""
    if isinstance(value, dict):
        return {k: _shape_specs(v, dtype, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and all(isinstance(d, (int, type(None))) for d in value):
        return keras.InputSpec(shape=(None, *tuple(value)[1:]), dtype=dtype, name=name)
    if isinstance(value, (list, tuple)):
        return type(value)(_shape_specs(v, dtype, f"{name}_{i}") for i, v in enumerate(value))
    raise SpecError(f"cannot read an input shape from the recorded build shape {value!r}")


def _is_spec(value: Any) -> bool:
    return isinstance(value, (keras.InputSpec, keras.KerasTensor, jax.ShapeDtypeStruct)) or (
        hasattr(value, "shape") and hasattr(value, "dtype")
    )


def _named_leaves(args: tuple[Any, ...], model: Any) -> tuple[Any, ...]:
    """Each spec as an :class:`InputLeaf`: named by its own name, else its dict key, else its
    position; ``None`` dims named ``batch`` (axis 0) or ``<input>_<axis>``."""
    used: set[str] = set()
    flat_index = 0
    several = len(jax.tree_util.tree_leaves(args, is_leaf=_is_spec)) > 1

    def leaf(path: Any, spec: Any) -> InputLeaf:
        nonlocal flat_index
        if not _is_spec(spec):
            raise SpecError(
                f"input_signature{jax.tree_util.keystr(path)} is {spec!r}: give a keras.InputSpec "
                "(shape and dtype), a keras.KerasTensor, a jax.ShapeDtypeStruct or an array"
            )
        shape, dtype = getattr(spec, "shape", None), getattr(spec, "dtype", None)
        if shape is None:
            raise SpecError(f"input_signature{jax.tree_util.keystr(path)} {spec!r} has no shape")
        name = _input_name(spec, path, flat_index if several else None, used)
        flat_index += 1
        dims = tuple(
            (_BATCH if axis == 0 else _dim_name(name, axis)) if d is None else d
            for axis, d in enumerate(shape)
        )
        dtype = keras.backend.standardize_dtype(
            dtype or getattr(model, "input_dtype", None) or "float32"
        )
        return InputLeaf(name, dims, dtype)

    def walk(path: tuple[Any, ...], value: Any) -> Any:
        # (not jax.tree_util.tree_map: it sorts a dict's keys, and the order the model
        # declares its inputs in decides which of two equal dims names them)
        if _is_spec(value):
            return leaf(path, value)
        if isinstance(value, dict):
            return {k: walk((*path, jax.tree_util.DictKey(k)), v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(
                walk((*path, jax.tree_util.SequenceKey(i)), v) for i, v in enumerate(value)
            )
        return leaf(path, value)  # (reported: not a spec)

    return tuple(walk((jax.tree_util.SequenceKey(i),), arg) for i, arg in enumerate(args))


def _input_name(spec: Any, path: Any, index: int | None, used: set[str]) -> str:
    """A dict key, else the spec's own name, else ``input`` (``input_<index>`` among several):
    the name Keras makes up for an unnamed ``keras.Input`` (``keras_tensor_156``) says nothing."""
    key = next((str(k.key) for k in reversed(path) if isinstance(k, jax.tree_util.DictKey)), None)
    name = getattr(spec, "name", None) if not isinstance(spec, jax.ShapeDtypeStruct) else None
    if name is not None and _MADE_UP.fullmatch(name):
        name = None
    name = key or name or ("input" if index is None else f"input_{index}")
    while name in used:
        name = f"{name}_{len(used)}"
    used.add(name)
    return name


def _dim_name(input_name: str, axis: int) -> str:
    """A symbolic dim name JAX's parser takes: an identifier made of the input's name."""
    stem = re.sub(r"\W", "_", input_name)
    return f"{stem if stem[:1].isalpha() else 'd_' + stem}_{axis}"


# -- dims the model needs equal, bounds it assumes ---------------------------------------------

_COMPARISON = re.compile(
    r"comparison '(?P<a>[^']+)' (?P<op><=|<|>=|>|==|!=) '(?P<b>[^']+)' is inconclusive"
)
_SHAPE = re.compile(r"\(([^()]*)\)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def infer_dims(
    fn: Callable[..., Any], signature: Signature, constraints: Sequence[str] = ()
) -> Signature:
    """The signature with the dims ``fn`` needs equal given one name and the bounds it assumes
    as constraints.

    ``fn`` is traced over the signature's specs (shapes only, :func:`jax.eval_shape`). Where JAX
    rejects two symbolic dims as different (shapes that do not broadcast, an undecided
    ``a == b``), the two are one dim of the model: they are unified. Where it cannot decide a
    bound of one dim against a number (``'token_ids_1' <= '32'``, a slice of a position table),
    the bound is assumed and the trace goes on; once the trace passes, each bound is kept when
    ``fn`` traced at concrete sizes works at the bound and fails just past it (a bound the
    model assumes). A bound that only picks a branch is dropped, so the export's error names
    its dims and the ``constraints=`` that decide it. The user's ``constraints`` hold throughout.
    """
    # each round unifies two dims or adds a new bound, so this many rounds end it
    for _ in range(len(signature.dim_names()) * (1 + _BOUNDS_PER_DIM)):
        try:
            _eval_shape(fn, signature, constraints)
            break
        except (TypeError, ValueError, IndexError, jax.errors.InconclusiveDimensionOperation) as e:
            message = str(e)
        pair = _equal_dims(message, signature)
        bound = _bound(message, signature) if pair is None else None
        if pair is not None:
            keep, drop = pair
            rename = {k: (keep if v == drop else v) for k, v in signature.rename.items()}
            signature = replace(signature, rename={**rename, drop: keep})
        elif bound is not None and bound not in signature.bounds:
            signature = replace(signature, bounds=(*signature.bounds, bound))
        else:
            break
    assumed = tuple(b for b in signature.bounds if _assumed(fn, b, signature, constraints))
    return replace(signature, bounds=assumed)


def _eval_shape(fn: Callable[..., Any], signature: Signature, constraints: Sequence[str]) -> Any:
    specs = parse_specs(
        signature.specs(), constraints=(*constraints, *signature.constraints()), warn=False
    )
    return jax.eval_shape(fn, *specs.args)


def _equal_dims(message: str, signature: Signature) -> tuple[str, str] | None:
    """Two of the signature's dims that the error shows JAX needs equal: ``a == b`` undecided,
    or shapes named in the message that differ there (dims aligned from the right, as
    broadcasting aligns them)."""
    dims = signature.dim_names()
    match = _COMPARISON.search(message)
    if match is not None:
        if match["op"] in ("==", "!=") and match["a"] in dims and match["b"] in dims:
            return _ordered(match["a"], match["b"], dims)
        return None
    lines = [line for line in _ANSI.sub("", message).splitlines() if line.strip()]
    shapes = [
        [d.strip() for d in group.split(",") if d.strip()]
        for line in lines[:2]  # (Keras puts its own line before JAX's)
        for group in _SHAPE.findall(line)
    ]
    for i, a in enumerate(shapes):
        for b in shapes[i + 1 :]:
            for x, y in zip(reversed(a), reversed(b), strict=False):
                if x != y and x in dims and y in dims:
                    return _ordered(x, y, dims)
    return None


def _ordered(a: str, b: str, dims: list[str]) -> tuple[str, str]:
    """(kept, dropped): the batch, else the dim of the input declared first, keeps its name."""
    return (a, b) if dims.index(a) < dims.index(b) else (b, a)


def _bound(message: str, signature: Signature) -> Bound | None:
    """``'d' <= 'k'`` (or ``<``, ``>=``, ``>``) undecided for a dim ``d`` of the signature, as
    the bound that decides it true."""
    match = _COMPARISON.search(message)
    if match is None or not re.fullmatch(r"-?\d+", match["b"]) or match["op"] in ("==", "!="):
        return None
    dim, op, k = match["a"], match["op"], int(match["b"])
    if dim not in signature.dim_names():
        return None
    upper = op in ("<=", "<")
    size = k if op in ("<=", ">=") else k - 1 if upper else k + 1
    return Bound(dim, upper, size) if size >= 1 else None


def _assumed(
    fn: Callable[..., Any], bound: Bound, signature: Signature, constraints: Sequence[str]
) -> bool:
    """Whether ``fn`` traces at concrete sizes with the dim at the bound and fails just past it
    (the other dims at a size within every bound)."""
    past = bound.size + 1 if bound.upper else bound.size - 1
    dim = signature.rename.get(bound.dim, bound.dim)
    return past >= 1 and (
        _fits(fn, signature, constraints, {dim: bound.size})
        and not _fits(fn, signature, constraints, {dim: past})
    )


def _upper_bounds(constraints: Sequence[str]) -> dict[str, int]:
    """The least ``d <= k`` of each dim among the constraints."""
    uppers: dict[str, int] = {}
    for c in constraints:
        name, sep, k = c.partition("<=")
        if sep and k.strip().isdigit():
            uppers[name.strip()] = min(uppers.get(name.strip(), int(k)), int(k))
    return uppers


def _concrete_sizes(
    signature: Signature, constraints: Sequence[str], sizes: dict[str, int]
) -> dict[str, int]:
    """A size for every dim name of the signature (unified ones included): ``sizes``, else 2 for
    the batch and 8 (or the least upper bound below it) for the others."""
    uppers = _upper_bounds((*constraints, *signature.constraints()))
    chosen = {
        d: sizes.get(d, 2 if d == _BATCH else min(8, uppers.get(d, 8)))
        for d in signature.dim_names()
    }
    return {d: chosen[signature.rename.get(d, d)] for d in (*signature.rename, *chosen)}


def _fits(
    fn: Callable[..., Any],
    signature: Signature,
    constraints: Sequence[str],
    sizes: dict[str, int],
) -> bool:
    """Whether ``fn`` traces with every symbolic dim at a concrete size: ``sizes``, else 2 for
    the batch and 8 (or the least upper bound below it) for the others."""
    concrete = _concrete_sizes(signature, constraints, sizes)

    def spec(leaf: InputLeaf) -> jax.ShapeDtypeStruct:
        dtype = np.dtype(leaf.dtype)
        return jax.ShapeDtypeStruct(leaf.shape(concrete), dtype)  # type: ignore[arg-type]

    try:
        jax.eval_shape(fn, *[_map_leaves(spec, arg) for arg in signature.args])
    except Exception:
        return False
    return True


# -- the export --------------------------------------------------------------------------------


def _build(model: Any, signature: Signature, constraints: Sequence[str]) -> None:
    """Create the weights of a model never built: Keras creates them on the first call, which
    must not be the trace (they would be values of the trace)."""
    concrete = _concrete_sizes(signature, constraints, {})
    model(
        *[
            _map_leaves(lambda leaf: np.zeros(leaf.shape(concrete), leaf.dtype), arg)
            for arg in signature.args
        ],
        training=False,
    )


def output_names(model: Any) -> list[str] | None:
    """The names of the model's outputs in the order JAX flattens them: a dict's keys, else the
    names Keras gives them (``model.output_names``); None where they are not known."""
    struct = getattr(model, "_outputs_struct", None)
    if isinstance(struct, dict):
        names = list(jax.tree_util.tree_leaves({k: k for k in struct}))
    else:
        names = list(getattr(model, "output_names", None) or _producers(model))
    if not names or len(set(names)) != len(names):
        return None
    return names


def _producers(model: Any) -> list[str]:
    """The names of the layers that make a model's outputs (a Sequential model's last layer)."""
    try:
        outputs = model.outputs or []
    except (AttributeError, ValueError):
        return []
    history = [getattr(t, "_keras_history", None) for t in outputs]
    return [h.operation.name for h in history if h is not None]


@checked_options(to_onnx)
def export_onnx(
    model: Any,
    path: str | os.PathLike[str] | None = None,
    input_signature: Any = None,
    *,
    verify: bool | Mapping[str, Any] = False,
    **options: Any,
) -> onnx.ModelProto | str:
    """Export a Keras 3 model (JAX backend) in inference mode, as ``model.export(path,
    format="onnx")`` does, with every option of :func:`~jax2onnx_nn.to_onnx`.

    Args:
        model: a built ``keras.Model``: functional, Sequential (with ``keras.Input``) or
            subclassed (called once or built), a keras-hub backbone.
        path: write the model there and return the path; without it, return the ModelProto.
        input_signature: one spec per positional argument of the model's ``call`` (a
            ``keras.InputSpec``, ``keras.KerasTensor``, ``jax.ShapeDtypeStruct`` or array, or a
            dict / list of them); by default the model's own inputs. ``None`` dims are symbolic:
            ``batch`` on axis 0 of every input, ``<input>_<axis>`` elsewhere; dims the model
            needs equal share one name, and bounds it assumes (a sequence within the position
            table) become constraints.
        options: those of :func:`~jax2onnx_nn.to_onnx` (``verify``, ``target``, ``precision``,
            ``external_data``, ``constraints`` over the dim names above, ``input_names``,
            ``output_names``, ...).
        verify: ``True``, or the keywords of :func:`~jax2onnx_nn.verify` (``runtime``,
            ``sizes``, ``rtol``, ...): run the export in onnxruntime (or that runtime) against
            Keras on random inputs, at two sizes of every symbolic dim (batch 1 and 3, others
            2 and 5 or their upper bound), and raise an ``AssertionError`` with the comparison
            table when they differ.

    Returns:
        The ``onnx.ModelProto``, or the path written when ``path`` is given. Inputs are named
        after the model's inputs (``token_ids``), outputs after its outputs.

    Raises:
        SpecError: the model has no known inputs (pass ``input_signature``), or a comparison of
            symbolic dims the model makes is not decided (the message names the dims and the
            ``constraints=`` that decides it).

    Example::

        path = export_onnx(backbone, "bert.onnx", verify=True)
    """
    signature = model_signature(model, input_signature)
    fn = in_mode(model, bool(options.get("training", False)))
    if not getattr(model, "built", True):
        _build(model, signature, options.get("constraints") or ())
    given = tuple(options.get("constraints") or ())
    try:
        exported = _export(fn, model, signature, path, options)
    except SpecError as err:
        if not hasattr(err, "jax_error"):  # (not a shape JAX rejected while tracing)
            raise
        # JAX's shape checks rejected the dims as named: those the model needs equal are
        # unified, the bounds it assumes added (one extra trace each); else the error stands
        inferred = infer_dims(fn, signature, given)
        if inferred == signature:
            raise
        exported, signature = _export(fn, model, inferred, path, options), inferred
    if verify:
        checks = dict(verify) if isinstance(verify, Mapping) else {}
        constraints = (*given, *signature.constraints())
        checks.setdefault("sizes", _verify_sizes(signature, constraints))
        checks.setdefault("enable_double_precision", options.get("enable_double_precision"))
        report = verify_export(fn, exported, signature.specs(), **checks)
        report.raise_if_failed()
    return exported


def _export(
    fn: Callable[..., Any],
    model: Any,
    signature: Signature,
    path: str | os.PathLike[str] | None,
    options: dict[str, Any],
) -> Any:
    """``to_onnx`` over the signature: names from the model unless the options give them."""
    options = {
        "model_name": getattr(model, "name", None) or type(model).__name__,
        "input_names": signature.input_names(),
        "output_names": output_names(model),
        **options,
        "constraints": (*(options.get("constraints") or ()), *signature.constraints()),
    }
    if options["output_names"] is None:
        del options["output_names"]
    return to_onnx(fn, signature.specs(), path=path, **options)


def _verify_sizes(signature: Signature, constraints: Sequence[str]) -> dict[str, list[int]]:
    """Two sizes of every symbolic dim: batch 1 and 3, the others 2 and 5 (or their upper
    bound)."""
    uppers = _upper_bounds(constraints)
    return {
        d: [1, 3] if d == _BATCH else [min(2, uppers.get(d, 2)), min(5, uppers.get(d, 5))]
        for d in signature.dim_names()
    }


__all__ = ["InputLeaf", "Signature", "export_onnx", "infer_dims", "model_signature"]
