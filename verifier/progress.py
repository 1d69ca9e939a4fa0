"""A progress bar for a long verification: what ``tlog-verify export`` draws on a terminal.

:func:`verifier.export.verify_export_file` reports its progress through a callback
``progress(done, total)`` (bytes read so far, and the file's size or 0 when unknown). A
:class:`ProgressBar` is such a callback that draws one line on a text stream, redrawn in place
with CR; :func:`progress_wanted` is the rule the command applies before drawing one: the
stream is a terminal and the caller did not ask for none.

Hand-written rather than tqdm or rich, measured (``python -X importtime``, this machine under
load): this module imports in about 1 ms, ``import tqdm`` takes 55-75 ms and
``rich.progress`` 50-70 ms; rich would add about 13 MB (rich, Pygments, markdown-it-py) and
tqdm 0.6 MB to the auditor's base install (``pip install tlog-toolkit``), which is kept to
what verifying needs. One bar on one stream, redrawn with CR, is all the verifier draws.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["ProgressBar", "progress_wanted"]


class ProgressBar:
    """A one-line progress bar on a terminal: ``[#####.....]  42%  12.0/28.5 MiB``.

    Redrawn at most every ``interval`` seconds (and always at the end); :meth:`close` erases
    it.
    """

    def __init__(
        self,
        stream: TextIO,
        label: str,
        *,
        width: int = 30,
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._label = label
        self._width = width
        self._interval = interval
        self._clock = clock
        self._last = -interval
        self._drawn = 0

    @staticmethod
    def text(label: str, done: int, total: int, width: int = 30) -> str:
        """The bar's text for ``done`` of ``total`` bytes (total 0: unknown)."""
        mib = 1 << 20
        if total <= 0:
            return f"{label}  {done / mib:.1f} MiB read"
        frac = min(done / total, 1.0)
        filled = int(frac * width)
        bar = "#" * filled + "." * (width - filled)
        return f"{label}  [{bar}] {frac * 100:3.0f}%  {done / mib:.1f}/{total / mib:.1f} MiB"

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        if now - self._last < self._interval and done < total:
            return
        self._last = now
        line = self.text(self._label, done, total, self._width)
        # Blank what a longer previous line leaves on the right.
        pad = max(self._drawn - len(line), 0)
        self._stream.write("\r" + line + " " * pad)
        self._stream.flush()
        self._drawn = len(line)

    def close(self) -> None:
        """Erase the bar (if one was drawn)."""
        if self._drawn:
            self._stream.write("\r" + " " * self._drawn + "\r")
            self._stream.flush()
            self._drawn = 0


def progress_wanted(stream: TextIO, *, disabled: bool = False) -> bool:
    """Whether to draw a bar on ``stream``: not ``disabled`` and the stream is a terminal.

    A stream without ``isatty``, or a closed one, is not a terminal.
    """
    if disabled:
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
