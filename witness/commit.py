"""Group commit: the compare-and-swaps of concurrent add-checkpoint requests, made durable together.

Each log's requests are serialised by its lock in the server; the swaps of requests for
different logs that arrive while a batch commits (in a thread: storage may fsync) wait for
the next batch, and each batch is one :meth:`~witness.state.WitnessState.compare_and_swap_many`:
one transaction, one fsync. So the batch grows with the load and the number of fsyncs per
second stays bounded. :func:`state_failure` is how an error of the state reaches the client:
as the server's (500), never as the client's.
"""

from __future__ import annotations

import asyncio

from tlog.errors import (
    MalformedError,
    UsageError,
    VerificationError,
)
from witness.errors import (
    StateFailureError,
)
from witness.state import Cosigned, WitnessState

__all__ = ["GroupCommit", "state_failure"]

_MAX_BATCH = 256  # compare-and-swaps per group commit


def state_failure(e: Exception) -> Exception:
    """What the server raises for an error of the state: the state never judges the client's
    data (the server checked it before), so even its MalformedError is the server's problem
    (500)."""
    if isinstance(e, MalformedError | VerificationError):
        return StateFailureError(f"{type(e).__name__} from the state: {e}")
    return e


_Swap = tuple[Cosigned | None, Cosigned, "asyncio.Future[bool]"]


class GroupCommit:
    """Compare-and-swaps of concurrent requests (for different logs: each log's requests are
    serialised by its lock) made durable together: one thread hop and one commit per batch.

    While a batch commits in its thread, newly arriving swaps wait for the next batch, so the
    batch grows with the load and the number of fsyncs per second stays bounded.
    """

    def __init__(self, state: WitnessState) -> None:
        self.state = state
        self.pending: list[_Swap] = []
        self.task: asyncio.Task[None] | None = None

    async def swap(self, expected: Cosigned | None, new: Cosigned) -> bool:
        """:meth:`WitnessState.compare_and_swap`, batched. If the caller is cancelled the swap
        still runs (or not) atomically, like any other."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.pending.append((expected, new, future))
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.flush())
        return await future

    async def flush(self) -> None:
        batch: list[_Swap] = []
        try:
            while self.pending:
                batch, self.pending = self.pending[:_MAX_BATCH], self.pending[_MAX_BATCH:]
                results: list[bool | Exception]
                try:
                    results = await asyncio.to_thread(self.run, [(e, n) for e, n, _ in batch])
                except Exception as e:  # the whole batch failed: every request hears it
                    results = [e] * len(batch)
                for (_, _, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue  # its request was cancelled
                    if isinstance(result, Exception):
                        future.set_exception(state_failure(result))
                    else:
                        future.set_result(result)
                batch = []
        finally:
            self.task = None
            # Cancelled (the server is stopping) or failed here: no request waits forever.
            for _, _, future in [*batch, *self.pending]:
                if not future.done():
                    future.set_exception(StateFailureError("the group commit stopped"))
            self.pending = []

    def run(self, swaps: list[tuple[Cosigned | None, Cosigned]]) -> list[bool | Exception]:
        """In a thread: the batch in one transaction, in origin order. A batch refused for one
        bad swap (a UsageError: a precondition) is retried swap by swap, so only that one
        fails.

        Origin order (stable: two swaps of one origin keep theirs) because every process takes
        its rows' locks in it: two batches of two processes on one PostgreSQL that touch the
        same logs then queue instead of deadlocking (which PostgreSQL breaks only after
        ``deadlock_timeout``, a second)."""
        order = sorted(range(len(swaps)), key=lambda i: swaps[i][1].origin)
        try:
            verdicts = list(self.state.compare_and_swap_many([swaps[i] for i in order]))
            if len(verdicts) != len(swaps):
                raise StateFailureError(
                    f"the state gave {len(verdicts)} verdicts for {len(swaps)} swaps"
                )
            out_of_order: list[bool | Exception] = [False] * len(swaps)
            for position, i in enumerate(order):
                out_of_order[i] = verdicts[position]
            return out_of_order
        except UsageError:
            if len(swaps) == 1:
                raise
        out: list[bool | Exception] = []
        for expected, new in swaps:
            try:
                out.append(self.state.compare_and_swap(expected, new))
            except Exception as e:
                out.append(e)
        return out
