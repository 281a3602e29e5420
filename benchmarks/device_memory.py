"""Host memory of an export whose weights live in device memory (or are sharded over devices).

    python3 -m benchmarks.device_memory --megabytes 400 --devices 4

Builds an MLP whose weights are made on the devices (sharded over all of them, row blocks),
exports it with ``path=`` and prints the host memory the export needed above what the process
held before it (peak RSS: ``VmHWM`` reset through ``/proc/self/clear_refs``, and ``VmRSS``
sampled every millisecond where the kernel has no ``VmHWM``, as under gVisor) over the weight
bytes. On a CPU host the devices' memory is host memory too: the weights are in the "before".
Prints one line of ``key=value`` pairs (``ratio=`` is the figure); ``tests/core/
test_device_weights.py`` and ``benchmarks/tpu_check.py`` run it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def _status(field: str) -> int:
    """A ``/proc/self/status`` figure in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset the kernel's peak RSS (``VmHWM``); False where it cannot be (gVisor has neither
    ``clear_refs`` nor ``VmHWM``: the peak is then sampled)."""
    try:
        _status("VmHWM")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except (OSError, KeyError):
        return False


class _SampledPeak:
    """The largest ``VmRSS`` seen every millisecond while the ``with`` block runs."""

    def __enter__(self) -> _SampledPeak:
        import threading

        self.peak = _status("VmRSS")
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.001):
            self.peak = max(self.peak, _status("VmRSS"))

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, _status("VmRSS"))


def sharded_mlp(megabytes: float, layers: int, devices: int):
    """An MLP of ``layers`` square float32 weights of ``megabytes`` in all, made on the first
    ``devices`` devices (rows sharded over them), and its width."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    width = int((megabytes * 1e6 / 4 / layers) ** 0.5) // (8 * devices) * (8 * devices)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:devices]), ("x",))
    sharding = NamedSharding(mesh, P("x", None))
    make = jax.jit(
        lambda key: jax.random.normal(key, (width, width), jnp.float32) / width**0.5,
        out_shardings=sharding,
    )
    weights = [make(jax.random.key(i)) for i in range(layers)]
    for w in weights:
        w.block_until_ready()

    def mlp(x):
        for w in weights:
            x = jnp.tanh(x @ w)
        return x

    return mlp, weights, width


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=400)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument(
        "--devices", type=int, default=0, help="devices to shard over (default: all)"
    )
    args = parser.parse_args(argv)
    import jax

    from jax2onnx_nn import to_onnx

    devices = args.devices or len(jax.devices())
    fn, weights, width = sharded_mlp(args.megabytes, args.layers, devices)
    weight_bytes = sum(w.nbytes for w in weights)
    with tempfile.TemporaryDirectory() as folder:
        before = _status("VmRSS")
        exact = _reset_peak()
        start = time.perf_counter()
        with _SampledPeak() as sampled:
            path = to_onnx(fn, [(1, width)], path=os.path.join(folder, "m.onnx"))
        seconds = time.perf_counter() - start
        peak = max(_status("VmHWM"), sampled.peak) if exact else sampled.peak
        size = os.path.getsize(path) + (
            os.path.getsize(path + ".data") if os.path.exists(path + ".data") else 0
        )
    extra = max(peak - before, 0)
    print(
        f"platform={jax.default_backend()} devices={devices} weight_bytes={weight_bytes} "
        f"file_bytes={size} "
        f"host_extra_bytes={extra} ratio={extra / weight_bytes:.3f} seconds={seconds:.1f} "
        f"exact_peak={exact}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
