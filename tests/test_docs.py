"""The docs run as written, and print what they show.

Every fenced block of README.md and docs/*.md that a reader would type or run is a *command
block*: ``console`` blocks (and untagged blocks of ``$ `` lines) are sessions, ``sh`` blocks
scripts, ``python`` blocks programs. In a console block a line starting ``$ `` is a command
(continued by lines after one ending in a backslash, and by a here-document's lines), the lines
after it up to the next command are the output the doc shows.

Each doc's command blocks run in order as **one bash session** in a fresh directory (an
``export`` or a variable carries over, a server started with ``&`` keeps running until the
session ends), with the project's commands first on PATH, HOME in the directory and no TLOG_*
variable inherited. Where the doc shows output it must match, after masking in both a key's
hash and public key (``name+8 hex+base64``: keys are random) and a cosignature's ``time N``; a
line of just ``…`` stands for any number of lines, a ``…`` inside a line for any text there. A
command exits 0, or 1 where the doc shows the verdict ``INVALID``.

What a doc says comes from elsewhere (a witness created as root, the journal of the auditor
guide's examples, a log that forks) is made by a fixture, run before the block that needs it
and named in ``SESSIONS``; absolute paths of a system install (``/var/lib/witness``) are
mapped into the directory, the only change made to a doc's commands. The README needs neither:
its journey runs exactly as written. Blocks not run here are listed in ``SKIPPED`` (with the
reason) or ``ELSEWHERE`` (the embedder guide's Python, in tests/store/test_embedder_guide.py,
in one namespace); the inventory test keeps the lists and the counts honest.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

_FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```$", re.S | re.M)
# A vkey or key name with its hash: name+8 hex digits(+base64 key).
_KEY = re.compile(r"\+[0-9a-f]{8}(\+[A-Za-z0-9+/]+=*)?")
_TIME = re.compile(r"\btime \d+")
_HEREDOC = re.compile(r"<<-?'?(\w+)'?")
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
        heredoc = _HEREDOC.search(command[-1])
        if heredoc:  # the here-document's lines are the command's, up to its terminator
            while i + 1 < len(lines) and command[-1] != heredoc.group(1):
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
    (
        "README.md",
        "pip install . ",
    ): "the install section: tests/test_install.py installs into a fresh venv, the base "
    "install then the witness extra, and runs what each gives",
    (
        "docs/operator-guide.md",
        "python3 -m venv /opt/witness",
    ): "a system install as root (a system user, /opt and /var/lib); its last command, "
    "`tlog-witness init`, is the fixture of the operator session",
    (
        "docs/operator-guide.md",
        "$ tlog-witness add-log example.com/journal/acme",
    ): "pulling needs logs served on the network; tests/witness/test_feed.py runs add-log "
    "--tiles, set-tiles and feed against `tlog-store serve` and static tile trees on loopback",
}

# Blocks run by another test module, by (doc, language).
ELSEWHERE: dict[tuple[str, str], str] = {
    ("docs/embedder-guide.md", "python"): "tests/store/test_embedder_guide.py",
}


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TLOG_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp)
    return env


DOCS = ("README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))))


def command_blocks(doc: str) -> list[Block]:
    """The blocks of a doc that a reader would type or run: ``console``, ``sh`` and
    ``python`` blocks, and untagged ones that are console sessions (lines of ``$ ``)."""
    return [
        b
        for b in blocks(ROOT / doc)
        if b.lang in ("console", "sh", "python") or (b.lang == "" and b.text.startswith("$ "))
    ]


def _skipped(block: Block) -> bool:
    return any(block.doc == doc and block.text.startswith(start) for doc, start in SKIPPED)


def session_blocks(doc: str) -> list[Block]:
    """The blocks this module runs for a doc, in order: all its command blocks but those
    skipped or run elsewhere."""
    return [b for b in command_blocks(doc) if not _skipped(b) and (b.doc, b.lang) not in ELSEWHERE]


def block_steps(block: Block) -> list[Step]:
    """A console block's commands; an ``sh`` block is one script (``set -e``), a ``python``
    block one program (``python -``), neither with output shown."""
    if block.lang == "sh":  # each line must succeed, as the block means
        return [Step(block.line, f"(\nset -e\n{block.text})", ())]
    if block.lang == "python":
        return [Step(block.line, f"python - <<'__DOC_PY__'\n{block.text}__DOC_PY__", ())]
    return steps(block)


def test_every_command_block_is_run_or_listed() -> None:
    """Every command block of README.md and docs/ is run here, run by the test ELSEWHERE names,
    or listed in SKIPPED with its reason; every SKIPPED entry names exactly one block."""
    every = [b for doc in DOCS for b in command_blocks(doc)]
    run = [b for doc in SESSIONS for b in session_blocks(doc)]
    elsewhere = [b for b in every if (b.doc, b.lang) in ELSEWHERE]
    skipped = [b for b in every if _skipped(b)]
    for doc, start in SKIPPED:
        assert sum(b.doc == doc and b.text.startswith(start) for b in every) == 1, (doc, start)
    left = [(b.doc, b.line, b.lang) for b in every if b not in run + elsewhere + skipped]
    assert not left, f"command blocks neither run nor listed: {left}"
    assert len(skipped) == len(SKIPPED)
    # The count, so that a change in it is seen: run here, run elsewhere, skipped.
    assert (len(run), len(elsewhere), len(skipped)) == COUNTS, (
        len(run),
        len(elsewhere),
        len(skipped),
    )


_LISTEN = re.compile(r"--listen (\S+):(\d+)")
_BACKGROUND = re.compile(r"[^&]&\s*(#.*)?$")  # a command ending in `&`, maybe before a comment


def expected_status(step: Step) -> int:
    """0, or 1 where the doc shows the verdict INVALID (the verifier's exit 1)."""
    return 1 if step.output and step.output[0].endswith(": INVALID") else 0


def script(run: list[Step]) -> str:
    """One bash script of the steps, as one shell session: each step's output between markers
    on both streams, and its exit status after it; the first failure ends the script. After a
    step that starts a server in the background (``&``), the script waits for its port to
    accept connections, as a reader would wait before typing the next command."""
    out = ["set -o pipefail", "rc=0"]
    for n, step in enumerate(run):
        # `(exit $rc)`: a step's `$?` is the previous command's status, as in a shell.
        out.append(f"printf '\\n@@step {n}\\n'; printf '\\n@@step {n}\\n' >&2; (exit $rc)")
        out.append(step.command)
        out.append(
            f"rc=$?; printf '\\n@@rc {n} %d\\n' $rc; [ $rc = {expected_status(step)} ] || exit 1"
        )
        if _BACKGROUND.search(step.command):
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
        where = f"{doc}:{step.line}: {step.command!r}" if step.line else f"{doc}: fixture"
        assert n in statuses, f"{where} did not finish: {errs.get(n)}"
        want = expected_status(step)
        assert statuses[n] == want, f"{where} exited {statuses[n]}, not {want}: {errs.get(n)}"
        actual = outs.get(n, [])
        assert matches(step.output, actual), f"{where} printed {actual}, {doc} shows {step.output}"
    return len(run)


INSTALL = "pip install '/path/to/tlog-toolkit"


@dataclass(frozen=True)
class Session:
    """How a doc's console blocks run as one shell session. ``before`` maps how a block
    starts to the bash lines run before it (files and state the doc says come from elsewhere:
    a fixture, its output not checked); ``paths`` maps the doc's absolute paths into the temp
    directory (the one change made to its commands); ``port`` is one the session's server
    binds, which two sessions never hold at once; a line of a command that starts with one of
    ``done`` is what the suite has already done (the install: it runs in the installed project,
    and tests/test_install.py installs it in a fresh venv), and becomes a no-op."""

    before: dict[str, str]
    paths: tuple[str, ...] = ()
    port: int | None = None
    done: tuple[str, ...] = (INSTALL,)


DOCS_DATA = ROOT / "testdata" / "docs"
LOG_KEY = DOCS_DATA / "example.com-log.key"

# The operator guide's split view (its section "Evidence"): the log example.com/log, whose key
# is testdata/docs/example.com-log.key, signs a checkpoint of 3 leaves (a b c), which the
# witness cosigns, and then one of 5 leaves (a b x y z) with a consistency proof from size 3 of
# the second tree: it leads to the request's root from another root at size 3.
_SPLIT_VIEW = f"""
leaves() {{
  for e in "$@"; do printf '\\000%s' "$e" | openssl dgst -sha256 -binary | base64; done
}}
leaves a b c > honest.txt; leaves a b x y z > fork.txt
cp {LOG_KEY} log.key; chmod 600 log.key
root() {{ tlog root "$1" | sed -n 's/^root //p'; }}
sign() {{ printf 'example.com/log\\n%s\\n%s\\n' "$1" "$(root "$2")" | tlog sign --key log.key; }}
sign 3 honest.txt > honest.note; sign 5 fork.txt > fork.note
post() {{
  curl -s -o /dev/null -w '%{{http_code}}' --data-binary @- http://127.0.0.1:7380/add-checkpoint
}}
test "$( (printf 'old 0\\n\\n'; cat honest.note) | post)" = 200
fork() {{ printf 'old 3\\n'; tlog prove --old 3 fork.txt; printf '\\n'; cat fork.note; }}
test "$(fork | post)" = 422
"""

# The auditor guide's files (its section 12): the journal tests/verifier/test_commands.py
# builds, with deterministic keys and clock, and what its operator hands the auditor. The
# operator's shell knows its store (TLOG_STORE_DB), for section 12.5's operator lines.
_AUDITOR_FILES = f"""
python - <<'__FIXTURE__'
import sys
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
from tests.verifier.test_commands import RECORD_VKEY, build, remove_sealed_run
from tlog.encoding import b64encode
j = build(Path("."))
Path("run-a.tlog-proof").write_bytes(j.proof_a)
Path("run-a.jsonl").write_bytes(j.records_a)
Path("kept.checkpoint").write_bytes(j.notes[1])  # size 3
Path("old").write_bytes(j.notes[1])
Path("checkpoint").write_bytes(j.notes[2])  # size 4
Path("new").write_bytes(j.notes[2])
Path("proof").write_text("".join(b64encode(h) + "\\n" for h in j.store_proofs[(3, 4)]))
Path("forged.export").write_bytes(remove_sealed_run(j.export, "run-b"))
Path("records.vkey").write_text(RECORD_VKEY + "\\n")
__FIXTURE__
export TLOG_STORE_DB=journal.db
"""

SESSIONS: dict[str, Session] = {
    "docs/embedder-guide.md": Session(before={}),
    "docs/auditor-guide.md": Session(
        before={"pip install '/path/to/tlog-toolkit' ": _AUDITOR_FILES}
    ),
    "README.md": Session(before={}, port=7380),
    "docs/operator-guide.md": Session(
        before={
            "$ export TLOG_WITNESS_CONFIG=": (
                "tlog-witness init --name witness.example.org/w1 --dir /var/lib/witness"
                " > /dev/null\n"
                "printf 'logs/v0\\nvkey %s\\norigin go.sum database tree\\nqpd 1440\\n"
                "contact golang-dev@googlegroups.com\\n' "
                "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8 > log-list.1"
            ),
            "$ tlog-witness evidence ": _SPLIT_VIEW,
        },
        paths=("/var/lib/witness",),
        port=7380,
    ),
}
COUNTS = (20, 18, 4)  # command blocks run here, run elsewhere, skipped


def session_steps(doc: str, cwd: Path) -> list[Step]:
    """The steps of a doc's session: its console blocks' commands, the fixtures before them,
    its absolute paths mapped into ``cwd``."""
    session = SESSIONS[doc]
    out: list[Step] = []
    for block in session_blocks(doc):
        for start, lines in session.before.items():
            if block.text.startswith(start):
                out.append(Step(0, lines, ()))
        out.extend(block_steps(block))
    mapped = []
    for step in out:
        command = "\n".join(
            f": {line}" if line.startswith(session.done) else line
            for line in step.command.split("\n")
        )
        for path in session.paths:
            command = command.replace(path, f"{cwd}{path}")
        mapped.append(Step(step.line, command, step.output))
    for path in session.paths:
        (cwd / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    return mapped


@contextlib.contextmanager
def port_held(port: int | None) -> Iterator[None]:
    """Two sessions that bind one port (README's and the operator guide's) take turns, on
    whichever pytest worker they run."""
    if port is None:
        yield
        return
    with open(Path(tempfile.gettempdir()) / f"tlog-docs-port-{port}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            # Taken by some other program, the session would talk to a stranger: say so.
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("0.0.0.0", port))
                except OSError as exc:
                    raise AssertionError(f"port {port}, which the doc uses, is taken") from exc
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_doc(doc: str, cwd: Path) -> list[Step]:
    run = session_steps(doc, cwd)
    with port_held(SESSIONS[doc].port):
        run_session(doc, run, cwd)
    return run


def test_readme_runs_as_written(tmp_path: Path) -> None:
    """The README's journey, in one shell, exactly as written: the tour, the journal (init,
    acquire, append, seal, checkpoint), the witness (init, add-log, serve, publish), prove,
    export, the auditor's policy and verdicts, restore, and the restored export identical."""
    run = run_doc("README.md", tmp_path)
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
    assert len(run) >= 25
    assert not any(s.line == 0 for s in run)  # nothing but what the README shows


def test_operator_guide_runs_as_written(tmp_path: Path) -> None:
    """The operator guide's sessions: following logs (with TLOG_WITNESS_CONFIG, from any
    directory), serving, and checking kept split-view evidence as a third party would."""
    run = run_doc("docs/operator-guide.md", tmp_path)
    assert sum(s.line > 0 for s in run) >= 20


def test_auditor_guide_runs_as_written(tmp_path: Path) -> None:
    """The auditor guide's commands and worked examples, on the journal of its section 12:
    the verdicts, counts and failures it shows are the ones the verifier gives."""
    run = run_doc("docs/auditor-guide.md", tmp_path)
    assert sum(s.line > 0 for s in run) >= 10


def test_embedder_guide_commands_run_as_written(tmp_path: Path) -> None:
    """The embedder guide's command lines (its Python runs in test_embedder_guide.py): init,
    the outbox's verbs, export and restore in one command each, and the inbox's journey (a
    message buffered twice, claimed by its waiting run, journaled, its receipt verified)."""
    run = run_doc("docs/embedder-guide.md", tmp_path)
    assert len(run) == 4
    assert (tmp_path / "new.db").exists()


def test_operator_guide_systemd_unit_starts_the_witness(tmp_path: Path) -> None:
    """The unit file's ExecStart, in its WorkingDirectory, is a serve command that resolves
    (``--check``) on a witness made as the guide's section 1 makes it."""
    (unit,) = [b for b in blocks(ROOT / "docs/operator-guide.md") if b.lang == "ini"]
    fields = dict(
        line.split("=", 1) for line in unit.text.splitlines() if "=" in line and line[0] != "#"
    )
    witness = tmp_path / "var/lib/witness"
    bin_dir = Path(sys.executable).parent
    assert fields["WorkingDirectory"] == "/var/lib/witness"
    command = fields["ExecStart"].replace("/opt/witness/bin/", f"{bin_dir}/")
    command = command.replace("/var/lib/witness", str(witness))
    env = _env(tmp_path)
    subprocess.run(
        [bin_dir / "tlog-witness", "init", "--name", "witness.example.org/w1", "--dir", witness],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    proc = subprocess.run(
        [*command.split(), "--check"],
        cwd=witness,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "name witness.example.org/w1\n" in proc.stdout


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
