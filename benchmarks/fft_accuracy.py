"""Accuracy and latency of the two ways core/lowerings/fft.py lowers one FFT axis: onnxruntime's
DFT and a MatMul against the exact DFT matrix (what picks between them).

    python benchmarks/fft_accuracy.py [--lengths 7,16,100,128,1000,1024] [--batch 64]

Prints, per dtype and length, the error of a forward and an inverse complex transform
relative to the spectrum's max (numpy's float64 FFT as reference) and the median latency.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from jax2onnx_nn.core.lowerings.fft import FFT, IFFT, dft_matrix


def _session(nodes: list, inits: list, dtype: np.dtype) -> ort.InferenceSession:
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", elem, None)],
        [helper.make_tensor_value_info("y", elem, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def dft_session(inverse: bool, dtype: np.dtype) -> ort.InferenceSession:
    axis = helper.make_tensor("axis", TensorProto.INT64, [], [-2])
    return _session(
        [helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=int(inverse))], [axis], dtype
    )


def matmul_session(n: int, inverse: bool, dtype: np.dtype) -> ort.InferenceSession:
    matrix = onnx.numpy_helper.from_array(dft_matrix(n, IFFT if inverse else FFT, dtype), "m")
    shapes = [
        onnx.numpy_helper.from_array(np.array(s, np.int64), name)
        for s, name in (([0, 2 * n], "s1"), ([0, n, 2], "s2"))
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "s1"], ["p"]),
        helper.make_node("MatMul", ["p", "m"], ["q"]),
        helper.make_node("Reshape", ["q", "s2"], ["y"]),
    ]
    return _session(nodes, [matrix, *shapes], dtype)


def measure(
    session: ort.InferenceSession, pairs: np.ndarray, reference: np.ndarray
) -> tuple[float, float]:
    out = session.run(None, {"x": pairs})[0]
    error = float(
        np.max(np.abs(out[..., 0] + 1j * out[..., 1] - reference)) / np.max(np.abs(reference))
    )
    times = []
    for _ in range(20):
        start = time.perf_counter()
        session.run(None, {"x": pairs})
        times.append(time.perf_counter() - start)
    return error, float(np.median(times)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", default="7,16,27,32,100,128,1000,1024")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(
        f"{'dtype':8} {'n':>5} {'kind':5} {'DFT err':>9} {'MatMul err':>10} {'DFT us':>8} "
        f"{'MatMul us':>9}"
    )
    for dtype in (np.float32, np.float64):
        for n in (int(v) for v in args.lengths.split(",")):
            z = rng.standard_normal((args.batch, n)) + 1j * rng.standard_normal((args.batch, n))
            pairs = np.stack([z.real, z.imag], -1).astype(dtype)
            for inverse, reference in ((False, np.fft.fft(z)), (True, np.fft.ifft(z))):
                e_dft, t_dft = measure(dft_session(inverse, dtype), pairs, reference)
                e_mm, t_mm = measure(matmul_session(n, inverse, dtype), pairs, reference)
                kind = "ifft" if inverse else "fft"
                print(
                    f"{np.dtype(dtype).name:8} {n:5d} {kind:5} {e_dft:9.1e} {e_mm:10.1e} "
                    f"{t_dft:8.0f} {t_mm:9.0f}"
                )


if __name__ == "__main__":
    main()
