"""Writing an exported model to disk, tensor by tensor, straight from the weights' buffers.

``ir.to_proto`` of a whole model holds one copy of every weight and ``SerializeToString``
another; for a 7B-parameter model that is the difference between exporting on a workstation
and not at all. So the file is written in pieces: the model without its large initializers
(small), then each initializer on its own:

- in one file, as protobuf fragments ``ModelProto{graph{initializer{tensor}}}`` appended to
  the header; protobuf merges repeated occurrences of a message field, so the concatenation
  parses as the one model (at most 2 GB, protobuf's limit);
- or as external data: the raw bytes of each tensor in ``<file>.data``, the model referencing
  them by offset (automatic above ~1.8 GB of weights, or when asked).

Files are written to temporary names beside the target and renamed over it, and are created
like any file (mode 0666 minus the umask).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO, TypeAlias

import onnx
import onnx_ir as ir

from jax2onnx_nn.core.graph import tensor_bytes
from jax2onnx_nn.core.progress import Progress

EXTERNAL_DATA_THRESHOLD = 1_800_000_000  # bytes of weights above which files get external data
PROTOBUF_LIMIT = 2**31 - 1  # a serialized protobuf message is at most this long
_STREAMED_MIN_BYTES = 1024  # tensors at least this large are written on their own
_ALIGNMENT = 64  # external data offsets are multiples of this (aligned memory maps)

# the initializers written on their own, each with its tensor (its const_value)
Streamed: TypeAlias = list[tuple[ir.Value, ir.TensorProtocol]]


def check_path(path: str | os.PathLike[str]) -> str:
    """The model path as a string, checked before any work is done: its folder must exist and
    it must not be a directory. Raises ``FileNotFoundError`` / ``IsADirectoryError`` naming
    ``path``."""
    text = os.fspath(path)
    if not isinstance(text, str):
        text = os.fsdecode(text)
    if text == "" or os.path.isdir(text):
        raise IsADirectoryError(
            f"path {text!r} is a directory; give a file name, e.g. "
            f"{os.path.join(text or '.', 'model.onnx')!r}"
        )
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            f"path {text!r}: the folder {folder!r} does not exist; create it first"
        )
    if not os.access(folder, os.W_OK):
        raise PermissionError(f"path {text!r}: the folder {folder!r} is not writable")
    return text


def save_model(
    model: ir.Model,
    path: str | os.PathLike[str],
    *,
    external_data: bool | None = None,
    progress: Progress | None = None,
) -> str:
    """Write ``model`` to ``path`` atomically, never holding a second copy of its weights.

    Args:
        model: the model (its tensors are read, never copied as a whole).
        path: the ``.onnx`` file; with external data the weights go to ``<path>.data`` beside it.
        external_data: ``True`` writes the weights as external data, ``False`` one file (a
            ``ValueError`` above protobuf's 2 GB), ``None`` (default) decides by size: external
            data above ~1.8 GB of weights.

    Returns:
        ``path`` as a ``str`` (what ``onnxruntime.InferenceSession`` and ``onnx.load`` take).

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: ``path`` cannot be written.
        ValueError: ``external_data=False`` for a model above 2 GB.
    """
    path = check_path(path)
    streamed = _streamed(model)
    weight_bytes = sum(tensor.nbytes for _, tensor in streamed)
    external = (
        weight_bytes > EXTERNAL_DATA_THRESHOLD if external_data is None else bool(external_data)
    )
    if not external and weight_bytes > PROTOBUF_LIMIT:
        raise ValueError(
            f"the model has {weight_bytes / 1e9:.2f} GB of weights, above protobuf's 2 GB limit "
            "for one file; "
            "save with external_data=True (or leave it at None to decide by size)"
        )
    progress = progress or Progress()
    try:
        (_save_external if external else _save_single)(model, path, streamed, progress)
        progress.finish()
        return path
    finally:
        progress.close()


def _save_single(model: ir.Model, path: str, streamed: Streamed, progress: Progress) -> None:
    """One file: the model without the streamed initializers, then one fragment per tensor."""
    header = _without_initializers(model, [value for value, _ in streamed]).SerializeToString()
    with _replacing(path) as out:
        out.write(header)
        written, total = 0, sum(tensor.nbytes for _, tensor in streamed)
        for value, tensor in streamed:
            progress.update("writing weights", written, total, "B")
            _write_initializer_fragment(out, value, tensor)
            written += tensor.nbytes


def _save_external(model: ir.Model, path: str, streamed: Streamed, progress: Progress) -> None:
    """The raw bytes of each streamed tensor in ``<path>.data``; the model references them."""
    location = os.path.basename(path) + ".data"
    base_dir = os.path.dirname(os.path.abspath(path))
    saved = list(streamed)
    references = []
    total = sum(tensor.nbytes for _, tensor in saved)
    with _replacing(os.path.join(base_dir, location)) as data:
        offset = 0
        for value, tensor in saved:
            progress.update("writing weights", offset, total, "B")
            offset += data.write(b"\0" * (-offset % _ALIGNMENT))
            length = data.write(tensor_bytes(tensor))
            references.append(
                ir.ExternalTensor(
                    location,
                    offset,
                    length,
                    tensor.dtype,
                    shape=ir.Shape(tensor.shape.numpy()),
                    name=value.name or "",
                    base_dir=base_dir,
                )
            )
            offset += length
    try:
        for (value, _), reference in zip(saved, references, strict=True):
            value.const_value = reference
        header = ir.to_proto(model).SerializeToString()
    finally:
        for value, tensor in saved:
            value.const_value = tensor
    with _replacing(path) as out:
        out.write(header)


def _streamed(model: ir.Model) -> Streamed:
    """The initializers written on their own, each with its tensor: the named ones of at least
    ``_STREAMED_MIN_BYTES`` whose elements are whole bytes (not strings)."""
    return [
        (value, tensor)
        for value in model.graph.initializers.values()
        if (tensor := value.const_value) is not None
        and tensor.nbytes >= _STREAMED_MIN_BYTES
        and value.name is not None
        and tensor.dtype != ir.DataType.STRING
        and tensor.dtype.bitwidth % 8 == 0
    ]


def _without_initializers(model: ir.Model, values: list[ir.Value]) -> onnx.ModelProto:
    """The model's proto with ``values`` left out of the initializers (the nodes still read
    them by name); the model is unchanged afterwards."""
    graph = model.graph
    order = list(graph.initializers.values())
    skipped = {id(v) for v in values}
    try:
        graph.initializers.clear()
        for value in order:
            if id(value) not in skipped:
                graph.register_initializer(value)
        return ir.to_proto(model)
    finally:
        graph.initializers.clear()
        for value in order:
            graph.register_initializer(value)


def _write_initializer_fragment(out: BinaryIO, value: ir.Value, tensor: ir.TensorProtocol) -> None:
    """``ModelProto{graph{initializer{tensor}}}`` (``value``'s name, ``tensor`` its constant) with
    the raw bytes written from the buffer."""
    head = onnx.TensorProto(
        name=value.name, dims=list(tensor.shape.numpy()), data_type=tensor.dtype.value
    ).SerializeToString()
    raw = tensor_bytes(tensor)
    size = len(raw) if isinstance(raw, bytes) else raw.nbytes
    message_size = len(head) + len(_field(9, size)) + size  # TensorProto.raw_data = 9
    initializer = _field(5, message_size)  # GraphProto.initializer = 5
    out.write(_field(7, len(initializer) + message_size))  # ModelProto.graph = 7
    out.write(initializer)
    out.write(head)
    out.write(_field(9, size))
    out.write(raw)


def _field(number: int, length: int) -> bytes:
    """The tag and length prefix of a length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(length)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@contextmanager
def _replacing(path: str) -> Iterator[BinaryIO]:
    """A new file beside ``path`` (created with the umask applied) renamed over ``path`` when
    the block ends without an error, removed otherwise."""
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as out:
            yield out
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
