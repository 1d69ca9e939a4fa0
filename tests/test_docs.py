"""The README's command blocks run as written, and print what the README shows.

Every fenced block of README.md and docs/*.md is classified by its info string. ``console``
blocks are sessions: a line starting ``$ `` is a command (continued by lines after one ending in
a backslash), the lines after it up to the next command are the output the doc shows. The
README's console blocks run in order in one fresh directory, under bash (an ``export`` carrying
over to later commands, as in one shell), with the project's
commands first on PATH and no TLOG_* variable inherited, as a reader following the README would
type them. Where the doc shows output it must match, after three volatile things are masked in
both: a key's hash and public key (``name+8 hex+base64``: keys are random), a cosignature's
``time N``, and a line of just ``…``, which stands for any number of lines.

Blocks not run are listed in ``SKIPPED`` with the reason; the count test keeps that list honest
(a new console block anywhere fails it until it is run or listed). The embedder guide's Python
blocks run in tests/store/test_embedder_guide.py.
"""

from __future__ import annotations

import os
import re
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
    return bool(actual) and mask(shown[0]) == mask(actual[0]) and matches(shown[1:], actual[1:])


# Blocks deliberately not run, by (doc, how the block's first line starts), with the reason.
SKIPPED: dict[tuple[str, str], str] = {
    (
        "README.md",
        "make run ",
    ): "`make run` / `make test`: this suite is `make test`, and "
    "`make run` sets up a second venv (examples/tour.py is type-checked, not run here)",
    (
        "README.md",
        "pip install . ",
    ): "the install section: tests/test_install.py installs into a fresh venv, the base "
    "install then the witness extra, and runs what each gives",
    (
        "README.md",
        "$ tlog-witness init ",
    ): "the witness operator's block: a long-running server and a public "
    "address (the operator guide's journey test is not written yet)",
    (
        "README.md",
        "$ tlog-verify export ",
    ): "the auditor's block needs policy.txt and the witness journey above",
}


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TLOG_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp)
    return env


def test_every_readme_console_block_is_run_or_listed() -> None:
    console = [b for b in blocks(README) if b.lang in ("console", "sh")]
    assert len(console) == 6, [(b.line, b.lang) for b in console]
    for doc, start in SKIPPED:
        assert any(b.doc == doc and b.text.startswith(start) for b in console), (doc, start)
    assert [b for b in console if not _skipped(b)] == _readme_run()


def _skipped(block: Block) -> bool:
    return any(block.doc == doc and block.text.startswith(start) for doc, start in SKIPPED)


def _readme_run() -> list[Block]:
    return [b for b in blocks(README) if b.lang == "console" and not _skipped(b)]


def test_readme_console_blocks_run_as_written(tmp_path: Path) -> None:
    env = _env(tmp_path)
    ran = 0
    exports = ""  # each step runs in its own bash; an `export` carries over, as in one shell
    for block in _readme_run():
        for step in steps(block):
            proc = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", exports + step.command],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            where = f"README.md:{step.line}: {step.command!r}"
            assert proc.returncode == 0, f"{where} exited {proc.returncode}: {proc.stderr}"
            actual = proc.stdout.splitlines()
            assert matches(step.output, actual), (
                f"{where} printed {actual}, README shows {step.output}"
            )
            ran += 1
            if step.command.startswith("export "):
                exports += step.command + "\n"
    assert ran >= 14  # the tlog tour (7 commands) and the journal (8)


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
    ],
)
def test_output_matching(shown: tuple[str, ...], actual: list[str], ok: bool) -> None:
    assert matches(shown, actual) is ok
