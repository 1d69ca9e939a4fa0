"""Running the toolkit's commands from a test: in-process, or as a real subprocess.

The three commands (``tlog``, ``tlog-store``, ``tlog-witness``; docs/operator-guide.md and
docs/auditor-guide.md describe them) share one contract that their tests check the same way:
exit status 0 with nothing on standard error, or a documented non-zero status with exactly one
line on standard error that starts with the command's name (``tlog-store: VERB: ...``) and no
traceback. This module is the one copy of the plumbing:

* :func:`call_main` runs a ``main(argv) -> int`` in-process with standard input, output and
  error swapped for byte buffers — fast, for the many error cases;
* :func:`run_module` runs ``python -m MODULE`` as a subprocess, as a user would, with
  :func:`command_env` keeping the caller's own ``TLOG_*`` variables out of it;
* :func:`read_until_listening` waits for a ``serve`` subprocess to accept connections;
* :func:`expect_ok` and :func:`one_error_line` are the two halves of the contract;
* :func:`clean_env_fixture` makes a module's autouse fixture that unsets such variables for the
  in-process runs.
"""

from __future__ import annotations

import io
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
"""The repository root (put on PYTHONPATH for subprocesses that import the tests' helpers)."""


class Result(NamedTuple):
    """What an in-process run gave: exit status, standard output bytes, standard error text."""

    code: int
    out: bytes
    err: str


def call_main(
    main: Callable[[list[str]], int],
    argv: Sequence[str],
    stdin: bytes = b"",
    *,
    catch_exit: bool = False,
) -> Result:
    """Call ``main(list(argv))`` with byte-buffer standard streams (UTF-8) and restore them.

    ``catch_exit``: a ``SystemExit`` (argparse's ``--help``) becomes the result's status;
    without it, it propagates to the test (which may expect it).
    """
    out, err = io.BytesIO(), io.BytesIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8")
    sys.stderr = io.TextIOWrapper(err, encoding="utf-8")
    try:
        try:
            code = main(list(argv))
        except SystemExit as e:
            if not catch_exit:
                raise
            code = int(e.code or 0)
        sys.stdout.flush()
        sys.stderr.flush()
        return Result(code, out.getvalue(), err.getvalue().decode("utf-8"))
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved


def expect_ok(result: Result) -> bytes:
    """Status 0 and nothing on standard error; the standard output."""
    code, out, err = result
    assert (code, err) == (0, ""), err
    return out


def one_error_line(result: Result, status: int, prefix: str) -> str:
    """Status ``status`` and exactly one standard error line, starting with ``prefix``, with no
    traceback; that line."""
    code, _, err = result
    assert code == status, (code, err)
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(prefix), err
    assert "Traceback" not in err
    return err


def command_env(drop: Iterable[str] = (), *, root_on_path: bool = False) -> dict[str, str]:
    """This process's environment without the variables ``drop``; ``root_on_path``: the
    repository root first on PYTHONPATH."""
    dropped = set(drop)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    if root_on_path:
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_module(
    module: str,
    *args: str,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m module args...`` to completion, output captured; never raises on a
    non-zero status. ``stdin`` None: the subprocess inherits this process's standard input;
    ``env`` None: this process's environment."""
    argv = [sys.executable, "-m", module, *args]
    return subprocess.run(
        argv, input=stdin, capture_output=True, cwd=cwd, env=env, timeout=timeout, check=False
    )


def read_until_listening(
    proc: subprocess.Popen[bytes], stderr: Path, timeout: float
) -> tuple[list[str], bytes]:
    """Read a serving command's standard output until a line starts with ``listening on``
    (``serve`` prints it once it accepts connections): the complete lines read by then, and
    the bytes after the last of them. Fails the test, with ``stderr``'s text, when the process
    exits first or prints no such line within ``timeout`` seconds.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    printed: list[str] = []
    pending = b""
    while not any(line.startswith("listening on ") for line in printed):
        # os.read, not readline: a buffered reader would hide lines from select().
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            raise AssertionError(f"serve printed no address: {stderr.read_text()}")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise AssertionError(f"serve exited {proc.wait()}: {stderr.read_text()}")
        pending += chunk
        *done, pending = pending.split(b"\n")
        printed += [d.decode() for d in done]
    return printed, pending


def assert_one_error_line(
    proc: subprocess.CompletedProcess[bytes], status: int, prefix: str
) -> str:
    """A subprocess's :func:`one_error_line`, with nothing on standard output."""
    err = proc.stderr.decode("utf-8")
    assert proc.returncode == status, err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith(prefix)
    assert proc.stdout == b""
    return err


def clean_env_fixture(names: Sequence[str]) -> Callable[[pytest.MonkeyPatch], Iterator[None]]:
    """An autouse fixture that unsets ``names`` for each test of the module that binds it
    (``_clean_env = clean_env_fixture(ENV_VARS)``): no variable of the caller's shell leaks
    into an in-process run."""

    @pytest.fixture(autouse=True)
    def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        for name in names:
            monkeypatch.delenv(name, raising=False)
        yield

    return _clean_env
