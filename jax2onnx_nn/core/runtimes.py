"""Run an ONNX model in one of the runtimes users deploy to, on flat numpy inputs.

``onnxruntime`` (CPU), ``openvino`` (CPU plugin) and ``tract`` run in this process through
their Python packages; ``onnxruntime-web`` runs its WASM backend under Node.js through
``web_runner.mjs``: one Node process per Python process serves every request (start-up and
WASM compilation are paid once), exchanging raw tensor files named in JSON lines. Each runtime
is an optional dependency: :func:`missing_reason` says why one cannot run here.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jax2onnx_nn.core.signature import LoadedModel, ModelLike, load_model

RUNTIMES = ("onnxruntime", "onnxruntime-web", "openvino", "tract")

# Where ``npm install onnxruntime-web`` was run (a folder holding node_modules/onnxruntime-web):
# $JAX2ONNX_NN_ORT_WEB, else the repository's runtimes/web.
_WEB_DEFAULT = Path(__file__).resolve().parents[2] / "runtimes" / "web"
_WEB_RUNNER = Path(__file__).with_name("web_runner.mjs")

Session = Callable[[Sequence[np.ndarray]], list[np.ndarray]]


class RuntimeUnavailable(RuntimeError):
    """The runtime asked for is not installed here (the message says how to install it)."""


def _check_runtime(runtime: str) -> None:
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")


def web_package_dir() -> Path:
    return Path(os.environ.get("JAX2ONNX_NN_ORT_WEB", _WEB_DEFAULT))


def missing_reason(runtime: str) -> str | None:
    """None if ``runtime`` can run here, else why not and how to install it."""
    _check_runtime(runtime)
    if runtime == "onnxruntime-web":
        if shutil.which("node") is None:
            return "onnxruntime-web needs Node.js (`node` is not on PATH)"
        if not (web_package_dir() / "node_modules" / "onnxruntime-web").is_dir():
            return (
                f"onnxruntime-web is not installed in {web_package_dir()} (run "
                "`npm ci --no-audit --no-fund` there, or set JAX2ONNX_NN_ORT_WEB to a folder "
                "where `npm install onnxruntime-web` was run)"
            )
        return None
    try:
        _import_runtime(runtime)
    except ImportError:
        return f"{runtime} is not installed (pip install 'jax2onnx_nn[{runtime}]')"
    return None


def _import_runtime(runtime: str) -> Any:
    """The Python module of ``runtime`` (not onnxruntime-web), imported."""
    if runtime == "openvino":
        return _import_openvino()
    return importlib.import_module(runtime)


def _import_openvino() -> Any:
    """``import openvino`` with its usage telemetry off.

    Importing openvino sends a telemetry event (openvino/tools/ovc/__init__.py), and
    openvino-telemetry sends it from a process it forks off a thread: JAX then warns that
    ``os.fork()`` is incompatible with its threads and may deadlock. openvino-telemetry
    declines to send when its caller passes ``disable_in_ci`` (OpenVINO's does) and a CI
    variable (``CI=true``) is set; it decides once, when its singleton is made at this import,
    so the variable is set only while openvino is imported. An openvino that was already
    imported is returned as it is (its import event has been sent).
    """
    if "openvino" in sys.modules:
        return sys.modules["openvino"]
    saved = os.environ.get("CI")
    os.environ["CI"] = "true"
    try:
        return importlib.import_module("openvino")
    finally:
        if saved is None:
            os.environ.pop("CI", None)
        else:
            os.environ["CI"] = saved


def open_session(model: ModelLike | LoadedModel, runtime: str = "onnxruntime") -> Session:
    """Load ``model`` (a ModelProto, an onnx_ir Model, bytes, a path, or a
    :class:`~jax2onnx_nn.core.signature.LoadedModel`) in ``runtime``; the result maps flat
    inputs (graph-input order) to outputs.

    Raises:
        RuntimeUnavailable: the runtime is not installed here.
        ValueError: an unknown runtime name.
    """
    reason = missing_reason(runtime)
    if reason is not None:
        raise RuntimeUnavailable(reason)
    loaded = load_model(model)
    sessions = {
        "onnxruntime": _onnxruntime,
        "openvino": _openvino,
        "tract": _tract,
        "onnxruntime-web": _web,
    }
    return sessions[runtime](loaded)


def run_model(
    model: ModelLike | LoadedModel, flat_inputs: Sequence[Any], runtime: str = "onnxruntime"
) -> list[np.ndarray]:
    """Run ``model`` once in ``runtime`` on flat inputs (graph-input order)."""
    return open_session(model, runtime)([np.asarray(v) for v in flat_inputs])


def _contiguous(value: np.ndarray) -> np.ndarray:
    """A C-contiguous array of the same shape (``np.ascontiguousarray`` makes a scalar 1-d)."""
    return np.array(value, order="C", copy=None)


def _onnxruntime(model: LoadedModel) -> Session:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    # DequantizeLinear -> MatMul fused into MatMulNBits computes in float32, as JAX does (its
    # default, level 4, quantizes the activations to int8: core/quant/nbits.py)
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
    session = ort.InferenceSession(model.data, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    typed_outputs = any(o.type in _ORT_ONLY for o in session.get_outputs())

    def run(flat: Sequence[np.ndarray]) -> list[np.ndarray]:
        if not any(_onnx_only_type(v.dtype) for v in flat) and not typed_outputs:
            return session.run(None, dict(zip(names, flat, strict=True)))
        feeds = {name: _ort_value(ort, v) for name, v in zip(names, flat, strict=True)}
        return [_from_ort_value(v) for v in session.run_with_ort_values(None, feeds)]

    return run


# Element types numpy knows only through ml_dtypes (onnxruntime's numpy bridge does not):
# fed and read as their bits, in an OrtValue of the ONNX type (onnx.TensorProto's numbers).
_ONNX_ONLY = {
    "bfloat16": 16,
    "float8_e4m3fn": 17,
    "float8_e4m3fnuz": 18,
    "float8_e5m2": 19,
    "float8_e5m2fnuz": 20,
}
_ORT_ONLY = {f"tensor({name.replace('float8_', 'float8')})": name for name in _ONNX_ONLY}


def _onnx_only_type(dtype: np.dtype) -> bool:
    return np.dtype(dtype).name in _ONNX_ONLY


def _ort_value(ort: Any, value: np.ndarray) -> Any:
    """An onnxruntime OrtValue of ``value``; a bfloat16 / float8 array as its bits."""
    value = _contiguous(value)
    if not _onnx_only_type(value.dtype):
        return ort.OrtValue.ortvalue_from_numpy(value)
    bits = value.view(np.uint16 if value.dtype.itemsize == 2 else np.uint8)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, _ONNX_ONLY[value.dtype.name])


def _from_ort_value(value: Any) -> np.ndarray:
    """An onnxruntime OrtValue as numpy; bfloat16 / float8 (which its ``numpy()`` refuses)
    copied from its buffer as ml_dtypes arrays."""
    name = _ORT_ONLY.get(value.data_type())
    if name is None:
        return value.numpy()
    import ctypes

    import ml_dtypes

    dtype = np.dtype(getattr(ml_dtypes, name))
    shape = tuple(value.shape())
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.zeros(shape, dtype)
    buffer = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(value.data_ptr())
    return np.frombuffer(bytes(buffer), dtype=dtype).reshape(shape)


OPENVINO_CONFIG = {
    "INFERENCE_PRECISION_HINT": "f32",
    # a DequantizeLinear -> MatMul runs with the activations quantized to int8 per group of
    # 32 by default (0.017 abs error on a qwix int8 MLP); 0 keeps JAX's float32 arithmetic
    "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
}
"""The CPU plugin's settings under which OpenVINO computes JAX's numbers."""


def _openvino(model: LoadedModel) -> Session:
    ov = _import_openvino()
    input_names = model.signature.input_names
    core = ov.Core()
    # f32 stays f32 (the CPU plugin may otherwise compute in bf16 where the CPU has it)
    network = core.read_model(model=model.data, weights=b"")
    compiled = core.compile_model(network, "CPU", OPENVINO_CONFIG)
    # inputs go by name: OpenVINO drops the graph inputs nothing reads (``lambda a, b: b + 1``
    # has one parameter there), so positions do not line up with the graph's
    kept = {name for port in compiled.inputs for name in port.get_names()}

    def run(flat: Sequence[np.ndarray]) -> list[np.ndarray]:
        request = compiled.create_infer_request()
        feeds = {
            name: _openvino_input(ov, v)
            for name, v in zip(input_names, flat, strict=True)
            if name in kept
        }
        results = request.infer(feeds)
        return [_openvino_array(np.array(results[out]), out) for out in compiled.outputs]

    return run


def _openvino_input(ov: Any, value: np.ndarray) -> Any:
    """A bfloat16 input as an OpenVINO bf16 tensor holding its bits (a numpy bfloat16 array
    is read as float16); anything else as it is."""
    if np.dtype(value.dtype).name != "bfloat16":
        return value
    tensor = ov.Tensor(ov.Type.bf16, ov.Shape(list(value.shape)))
    tensor.data.view(np.uint16)[...] = _contiguous(value).view(np.uint16)
    return tensor


def _openvino_array(array: np.ndarray, port: Any) -> np.ndarray:
    """An OpenVINO output as numpy: a bfloat16 output comes back as its bits in a float16
    array (numpy has no bfloat16 of its own), reread as ml_dtypes.bfloat16."""
    if str(port.get_element_type()) == "<Type: 'bfloat16'>" and array.dtype.itemsize == 2:
        import ml_dtypes

        return array.view(ml_dtypes.bfloat16)
    return array


def _tract(model: LoadedModel) -> Session:
    import tract

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(model.data)
        runnable = tract.onnx().load(str(path)).into_model().into_runnable()

    def run(flat: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [out.to_numpy() for out in runnable.run([_contiguous(v) for v in flat])]

    return run


class _WebRunner:
    """The Node.js process that runs models in onnxruntime-web (WASM), shared by all sessions."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="jax2onnx_nn-web-"))
        self.process = subprocess.Popen(
            ["node", str(_WEB_RUNNER), str(web_package_dir())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.calls = 0

    def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(payload) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            err = self.process.stderr.read() if self.process.stderr else ""
            raise RuntimeError(f"the onnxruntime-web runner exited: {err.strip()}")
        return json.loads(line)

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


_runner: _WebRunner | None = None


def _web_runner() -> _WebRunner:
    global _runner
    if _runner is None or _runner.process.poll() is not None:
        _runner = _WebRunner()
        atexit.register(_runner.close)
    return _runner


_WEB_DTYPES = frozenset(
    "float32 float64 float16 int8 uint8 int16 uint16 int32 uint32 int64 uint64 bool".split()
)


def _web(model: LoadedModel) -> Session:
    runner = _web_runner()
    model_path = runner.dir / f"{hashlib.sha1(model.data).hexdigest()}.onnx"
    if not model_path.exists():
        model_path.write_bytes(model.data)
    names = model.signature.input_names

    def run(flat: Sequence[np.ndarray]) -> list[np.ndarray]:
        runner.calls += 1
        out_dir = runner.dir / f"call{runner.calls}"
        out_dir.mkdir()
        inputs = []
        for i, (name, value) in enumerate(zip(names, flat, strict=True)):
            value = _contiguous(value)
            if value.dtype.name not in _WEB_DTYPES:
                raise TypeError(
                    f"onnxruntime-web has no tensor type for {value.dtype} (input {name}): "
                    "export with target='onnxruntime-web' or io_dtype='float32' to take "
                    "float32 there (one Cast in the graph)"
                )
            file = out_dir / f"in_{i}.bin"
            value.tofile(file)
            inputs.append(
                {
                    "name": name,
                    "dtype": value.dtype.name,
                    "shape": list(value.shape),
                    "file": str(file),
                }
            )
        try:
            reply = runner.request(
                {"model": str(model_path), "inputs": inputs, "out": str(out_dir)}
            )
            if "error" in reply:
                raise RuntimeError(f"onnxruntime-web: {reply['error']}")
            return [_read_tensor(o) for o in reply["outputs"]]
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)

    return run


def _read_tensor(meta: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype("bool" if meta["dtype"] == "bool" else meta["dtype"])
    return np.fromfile(meta["file"], dtype=dtype).reshape(meta["shape"])
