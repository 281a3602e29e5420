"""benchmarks/tpu_check.py runs on a CPU host too (its accelerator checks in interpret mode)."""

import jax
import pytest

from benchmarks import tpu_check


@pytest.mark.skipif(
    len(jax.devices()) < 4, reason="needs 4 devices (tests/conftest.py sets XLA_FLAGS)"
)
def test_programs_part_passes_on_cpu(capsys):
    assert tpu_check.main(["--skip", "models", "streaming"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("shard_map", "pallas"))]
    assert [r.split()[0] for r in rows] == ["shard_map", "pallas", "pallas"]
    assert all(" PASS " in r for r in rows) and "shard_map 4 dev" in out and "(interpret)" in out
    assert out.rstrip().endswith("all PASS")
