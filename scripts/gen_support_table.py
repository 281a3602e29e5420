"""Regenerate the support table (docs/support.md) from the lowering registry (never edit it
by hand).

    python scripts/gen_support_table.py           # rewrite docs/support.md in place
    python scripts/gen_support_table.py --check   # exit 1 if docs/support.md is stale
    python scripts/gen_support_table.py --record  # rerun the tests, rewrite the records
                                                  # (tests/lowered_primitives.txt,
                                                  # tests/emitted_ops.txt), then docs/support.md
    python scripts/gen_support_table.py --record tests/core/test_svd.py   # add to the records

The "tested" column says whether a passing test of the suite lowers the primitive with its
registered rule; it is read from ``tests/lowered_primitives.txt``, which ``--record`` rewrites
by running ``pytest tests`` (slow tests skipped) with the recording plugin
``jax2onnx_nn.testing.coverage``; the same run records the ONNX ops each rule emitted
(``tests/emitted_ops.txt``), which ``tests/test_readme.py`` checks against the declared
``onnx_ops=``. Extra arguments after ``--`` go to pytest; with test paths (a subset of the
suite) the run's records are added to the committed ones (``--record-merge``), which only a
whole run rewrites.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- support-table:begin -->"
END = "<!-- support-table:end -->"
PAGE = ROOT / "docs" / "support.md"  # the page holding the table
RECORD = ROOT / "tests" / "lowered_primitives.txt"


def render() -> str:
    sys.path.insert(0, str(ROOT))
    from jax2onnx_nn.testing.support import markdown_table, read_record

    return markdown_table(read_record(RECORD))


def record(pytest_args: list[str]) -> int:
    """Run the test suite with the recording plugin; the record is written from passing tests."""
    command = [
        # one process: the recording plugin writes the records at the end of its session
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-p",
        "jax2onnx_nn.testing.coverage",
        "--record-lowered",
        str(RECORD),
        *(["--record-merge", *pytest_args] if pytest_args else ["tests"]),
    ]
    print("running:", " ".join(command))
    return subprocess.run(command, cwd=ROOT).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/support.md is stale")
    parser.add_argument(
        "--record", action="store_true", help="rerun the tests to rewrite the tested record first"
    )
    parser.add_argument(
        "pytest_args", nargs="*", help="with --record: pytest arguments (default: tests)"
    )
    args = parser.parse_args(argv)
    if args.record:
        rc = record(args.pytest_args)
        if rc not in (0, 1):  # 1: some tests failed; their primitives are not counted
            print(f"pytest exited with {rc}; record not trusted, docs/support.md unchanged")
            return rc
    sys.path.insert(0, str(ROOT))
    from jax2onnx_nn.testing.support import refresh_generated_block

    return refresh_generated_block(
        PAGE,
        BEGIN,
        END,
        render(),
        check=args.check,
        what="support table",
        script="scripts/gen_support_table.py",
    )


if __name__ == "__main__":
    sys.exit(main())
