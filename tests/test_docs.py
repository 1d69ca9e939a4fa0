"""The README's command blocks run as written, and print what the README shows.

Every fenced block of README.md and docs/*.md is classified by its info string. ``console``
blocks are sessions: a line starting ``$ `` is a command (continued by lines after one ending in
a backslash), the lines after it up to the next command are the output the doc shows. The
README's console blocks run in order in one fresh directory, under bash (an ``export`` carrying
over to later commands, as in one shell), with the project's
commands first on PATH and no TLOG_* variable inherited, as a reader following the README would
type them. Where the doc shows output it must match, after three volatile things are masked in
both: a key's hash and public key (``name+8 hex+base64``: keys are random), a cosignature's
``time N``, and a line of just ``…``, which stands for any number of lines (a ``…`` inside a line
stands for any text there).

Blocks not run are listed in ``SKIPPED`` with the reason; the count test keeps that list honest
(a new console block anywhere fails it until it is run or listed). The embedder guide's Python
blocks run in tests/store/test_embedder_guide.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

_FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```$", re.S | re.M)
# A vkey or key name with its hash: name+8 hex digits(+base64 key).
_KEY = re.compile(r"\+[0-9a-f]{8}(\+[A-Za-z0-9+/]+=*)?")
_TIME = re.compile(r"\btime \d+")
ELLIPSIS = "…"


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # line number of the block's first line, 1-based
    lang: str
    text: str


@dataclass(frozen=True)
class Step:
    line: int
    command: str
    output: tuple[str, ...]


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    name = str(path.relative_to(ROOT))
    return [
        Block(name, text.count("\n", 0, m.start(2)) + 1, m.group(1), m.group(2))
        for m in _FENCE.finditer(text)
    ]


def steps(block: Block) -> list[Step]:
    """The commands of a console block and the output shown after each."""
    out: list[Step] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            raise AssertionError(f"{block.doc}:{block.line + i}: output before any command")
        start = block.line + i
        command = [line[2:]]
        while command[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            command.append(lines[i])
        i += 1
        shown: list[str] = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        out.append(Step(start, "\n".join(command), tuple(shown)))
    return out


def mask(line: str) -> str:
    return _TIME.sub("time N", _KEY.sub("+KEY", line.rstrip()))


def matches(shown: tuple[str, ...], actual: list[str]) -> bool:
    """Whether the actual lines are what the doc shows, a ``…`` line matching any lines."""
    if not shown:
        return True
    if shown[0] == ELLIPSIS:
        return any(matches(shown[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and _line_matches(shown[0], actual[0]) and matches(shown[1:], actual[1:])


def _line_matches(shown: str, actual: str) -> bool:
    """A shown line against an actual one, both masked; a ``…`` inside a line stands for any
    text there (a key, a time, a duration)."""
    pattern = ".*".join(re.escape(part) for part in mask(shown).split(ELLIPSIS))
    return re.fullmatch(pattern, mask(actual)) is not None


# Blocks deliberately not run, by (doc, how the block's first line starts), with the reason.
SKIPPED: dict[tuple[str, str], str] = {
    (
        "README.md",
        "make run ",
    ): "`make run` / `make test`: this suite is `make test`, and "
    "`make run` sets up a second venv (examples/tour.py is type-checked, not run here)",
}


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TLOG_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp)
    return env


def test_every_readme_console_block_is_run_or_listed() -> None:
    console = [b for b in blocks(README) if b.lang in ("console", "sh")]
    assert len(console) == 5, [(b.line, b.lang) for b in console]
    for doc, start in SKIPPED:
        assert any(b.doc == doc and b.text.startswith(start) for b in console), (doc, start)
    assert [b for b in console if not _skipped(b)] == _readme_run()


def _skipped(block: Block) -> bool:
    return any(block.doc == doc and block.text.startswith(start) for doc, start in SKIPPED)


def _readme_run() -> list[Block]:
    return [b for b in blocks(README) if b.lang == "console" and not _skipped(b)]


_LISTEN = re.compile(r"--listen (\S+):(\d+)")


def script(run: list[Step]) -> str:
    """One bash script of the steps, as one shell session: each step's output between markers
    on both streams, and its exit status after it; the first failure ends the script. After a
    step that starts a server in the background (``&``), the script waits for its port to
    accept connections, as a reader would wait before typing the next command."""
    out = ["set -o pipefail"]
    for n, step in enumerate(run):
        out.append(f"printf '\\n@@step {n}\\n'; printf '\\n@@step {n}\\n' >&2")
        out.append(step.command)
        out.append(f"rc=$?; printf '\\n@@rc {n} %d\\n' $rc; [ $rc = 0 ] || exit 1")
        if step.command.rstrip().endswith("&"):
            listen = _LISTEN.search(step.command)
            assert listen, f"line {step.line}: a background command without --listen HOST:PORT"
            host, port = listen.groups()
            out.append(
                "for i in $(seq 300); do (exec 3<>/dev/tcp/"
                f"{host}/{port}) 2>/dev/null && break; sleep 0.1; done"
            )
    out.append("kill $(jobs -p) 2>/dev/null; wait")
    return "\n".join(out) + "\n"


def by_step(text: str) -> dict[int, list[str]]:
    """A script's stream cut at its step markers: step number -> its lines."""
    parts = re.split(r"\n?@@step (\d+)\n", text)
    out: dict[int, list[str]] = {}
    for k in range(1, len(parts) - 1, 2):
        body = re.split(r"\n?@@rc \d+ \d+\n", parts[k + 1])[0]
        out[int(parts[k])] = body.splitlines()
    return out


def run_session(doc: str, run: list[Step], cwd: Path, timeout: float = 300) -> int:
    """Runs the steps in one bash session in ``cwd``; asserts each succeeds and prints what the
    doc shows. Returns the number of steps run."""
    proc = subprocess.Popen(
        ["bash", "-c", script(run)],
        cwd=cwd,
        env=_env(cwd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        # A server a step left running (the script kills its jobs; this is for a timeout).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    outs, errs = by_step(stdout), by_step(stderr)
    statuses = dict((int(n), int(rc)) for n, rc in re.findall(r"@@rc (\d+) (\d+)", stdout))
    for n, step in enumerate(run):
        where = f"{doc}:{step.line}: {step.command!r}"
        assert n in statuses, f"{where} did not finish: {errs.get(n)}"
        assert statuses[n] == 0, f"{where} exited {statuses[n]}: {errs.get(n)}"
        actual = outs.get(n, [])
        assert matches(step.output, actual), f"{where} printed {actual}, {doc} shows {step.output}"
    return len(run)


def test_readme_console_blocks_run_as_written(tmp_path: Path) -> None:
    """The README's journey, in one shell, exactly as written: the tour, the journal (init,
    acquire, append, seal, checkpoint), the witness (init, add-log, serve, publish), prove,
    export, the auditor's policy and verdicts, restore, and the restored export identical."""
    run = [step for block in _readme_run() for step in steps(block)]
    commands = " ".join(s.command for s in run)
    for verb in (
        "tlog-store init",
        "tlog-store acquire",
        "tlog-store append",
        "tlog-store seal",
        "tlog-store checkpoint",
        "tlog-witness init",
        "tlog-witness add-log",
        "tlog-witness serve",
        "tlog-store publish",
        "tlog-store export",
        "tlog-verify export",
        "tlog-store prove",
        "tlog-verify proof",
        "tlog-store restore",
        "cmp ",
    ):
        assert verb in commands, verb
    assert run_session("README.md", run, tmp_path) >= 25


@pytest.mark.parametrize(
    ("shown", "actual", "ok"),
    [
        (("size 8",), ["size 8"], True),
        (("size 8",), ["size 9"], False),
        (("a+dd43c5b5+AfT4=",), ["a+5b0572c2+AQs8/+x="], True),
        (("a+dd43c5b5",), ["b+dd43c5b5"], False),
        (("x time 17",), ["x time 99"], True),
        (("a", ELLIPSIS), ["a", "b", "c"], True),
        (("a", ELLIPSIS, "c"), ["a", "b"], False),
        ((), ["anything"], True),
        (("a",), [], False),
        (("example.com/log+…",), ["example.com/log+dd43c5b5+AfT4="], True),
        (("w at … [size 1]",), ["w at 17 (0.01 s) [size 1]"], True),
        (("w at … [size 1]",), ["w at 17 (0.01 s) [size 2]"], False),
    ],
)
def test_output_matching(shown: tuple[str, ...], actual: list[str], ok: bool) -> None:
    assert matches(shown, actual) is ok
