"""Progress of a long export on stderr: equations lowered, passes run, bytes of weights written.

Shown once an export has run for :data:`DELAY` seconds, when stderr is a terminal or when
asked (``progress=True``); silent otherwise (pipes, logs, tests). On a terminal one line is
rewritten in place; elsewhere a line is printed at most once a second.
"""

from __future__ import annotations

import sys
import time

DELAY = 2.0  # seconds before anything is shown
INTERVAL = {True: 0.1, False: 1.0}  # seconds between updates on a terminal / elsewhere


class Progress:
    """One export's progress display (a no-op when disabled)."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.terminal = sys.stderr.isatty()
        self.enabled = self.terminal if enabled is None else bool(enabled)
        self.started = time.perf_counter()
        self._last = 0.0
        self._shown = False
        self._stage: tuple[str, int, str] | None = (
            None  # the last stage reported: its total and unit
        )

    def update(self, stage: str, done: int, total: int, unit: str = "") -> None:
        """Report ``done`` of ``total`` (in ``unit``) for ``stage``; cheap when nothing is shown."""
        if not self.enabled:
            return
        self._stage = (stage, total, unit)
        now = time.perf_counter()
        if now - self.started < DELAY or now - self._last < INTERVAL[self.terminal]:
            return
        self._write(stage, done, total, unit, now)

    def finish(self) -> None:
        """The last stage reported, as done (``total/total``), when the export has run long
        enough to be shown; then :meth:`close`."""
        now = time.perf_counter()
        if self._stage is not None and now - self.started >= DELAY:
            stage, total, unit = self._stage
            self._write(stage, total, total, unit, now)
        self.close()

    def close(self) -> None:
        """End the display (a newline after a line rewritten in place), also after a failure."""
        if self._shown and self.terminal:
            sys.stderr.write("\n")
            sys.stderr.flush()
        self._shown = False
        self._stage = None

    def _write(self, stage: str, done: int, total: int, unit: str, now: float) -> None:
        self._last = now
        self._shown = True
        text = (
            f"jax2onnx_nn: {stage} {_amount(done, unit)}/{_amount(total, unit)} "
            f"({now - self.started:.1f} s)"
        )
        sys.stderr.write(f"\r{text}\x1b[K" if self.terminal else text + "\n")
        sys.stderr.flush()


def _amount(n: int, unit: str) -> str:
    if unit == "B":
        return f"{n / 1e6:.0f} MB"
    return f"{n}{unit}"
