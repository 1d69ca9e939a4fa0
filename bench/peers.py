"""The peer libraries' virtualenv: find a Python >= 3.12, create ``.venv-peers``, run scripts in it.

The peers (aics-tlog 0.2.1 and pymerkle) need Python >= 3.12 while the project runs on 3.11, so
they never enter this process: they are installed into ``.venv-peers`` at the repository root
(git-ignored, removed by ``make clean``) and timed there by a script run in a subprocess, which
prints JSON on stdout. Nothing of theirs is vendored into the repository.

Finding an interpreter. Candidates, in this order: ``python3.13`` and ``python3.12`` on PATH,
then ``/root/.pyenv/versions/3.1[2-9]*/bin/python3`` and ``/usr/bin/python3.1[2-9]`` (sorted).
A candidate counts only if running ``<candidate> -c 'import sys; print(...)'`` succeeds and
reports a version >= 3.12: a pyenv shim exists on PATH even when the version it names is not
selected, and then fails when run.

Reuse. An existing ``.venv-peers`` whose Python runs, is >= 3.12 and already holds the pinned
packages is used as is (no network, no pip); one that does not run is recreated; missing
packages are installed with ``python -m pip install`` through whatever index pip is configured
with. Every failure raises :class:`PeerUnavailable` with a one-line reason for the report.
"""

from __future__ import annotations

import glob
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PEER_VENV = REPO_ROOT / ".venv-peers"

PEER_REQUIREMENTS: tuple[str, ...] = ("aics-tlog==0.2.1", "pymerkle")
"""pip requirements of the peers: a ``name==version`` pin, or a bare name for the latest."""

MIN_VERSION = (3, 12)

_PROBE = "import sys; print('%d.%d.%d' % sys.version_info[:3])"
_VERSION_LINE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


class PeerUnavailable(Exception):
    """The peers cannot be run; the message is the reason, one line, for the report."""


@dataclass(frozen=True)
class PeerEnv:
    """A working peer virtualenv."""

    python: Path
    """The virtualenv's interpreter."""
    version: str
    """Its version, e.g. ``3.12.1``."""
    packages: dict[str, str]
    """Installed version of each required distribution, by name."""


def _log(message: str) -> None:
    print(f"  [peers] {message}", file=sys.stderr, flush=True)


def candidate_interpreters() -> list[str]:
    """Interpreter paths to try, in order of preference, without duplicates (unchecked)."""
    found: list[str] = []
    for name in ("python3.13", "python3.12"):
        path = shutil.which(name)
        if path is not None:
            found.append(path)
    found.extend(sorted(glob.glob("/root/.pyenv/versions/3.1[2-9]*/bin/python3")))
    found.extend(sorted(glob.glob("/usr/bin/python3.1[2-9]")))
    unique: list[str] = []
    for path in found:
        if path not in unique:
            unique.append(path)
    return unique


def probe_interpreter(path: str | Path) -> str | None:
    """Run ``path`` and return its ``major.minor.micro`` version, or None if it does not run."""
    try:
        done = subprocess.run(
            [str(path), "-c", _PROBE], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = done.stdout.strip()
    if done.returncode != 0 or _VERSION_LINE.match(line) is None:
        return None
    return line


def _new_enough(version: str) -> bool:
    major, minor, _ = (int(part) for part in version.split("."))
    return (major, minor) >= MIN_VERSION


def find_interpreter() -> tuple[str, str] | None:
    """The first candidate that runs and is >= 3.12, as ``(path, version)``; None if none."""
    for path in candidate_interpreters():
        version = probe_interpreter(path)
        if version is not None and _new_enough(version):
            return path, version
        _log(f"skipping {path}: {'does not run' if version is None else version}")
    return None


def _installed(python: Path, names: Sequence[str]) -> dict[str, str | None]:
    script = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try:\n"
        "        out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError:\n"
        "        out[n] = None\n"
        "print(json.dumps(out))\n"
    )
    out = _run_or_raise(
        [str(python), "-I", "-c", script, *names], 60, f"cannot list packages in {PEER_VENV}"
    )
    result: dict[str, str | None] = json.loads(out)
    return result


def _split_requirement(requirement: str) -> tuple[str, str | None]:
    name, _, pin = requirement.partition("==")
    return name, pin or None


def _missing(installed: dict[str, str | None], requirements: Sequence[str]) -> list[str]:
    missing = []
    for requirement in requirements:
        name, pin = _split_requirement(requirement)
        have = installed.get(name)
        if have is None or (pin is not None and have != pin):
            missing.append(requirement)
    return missing


def _tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"


def _run_or_raise(argv: Sequence[str], timeout: float, failed: str) -> str:
    """Run ``argv`` (text, output captured, at most ``timeout`` seconds); its standard output.
    A non-zero status raises :class:`PeerUnavailable`: ``failed``, then the tail of stderr."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise PeerUnavailable(f"{failed}: {_tail(done.stderr)}")
    return done.stdout


def ensure_peer_env(
    requirements: Sequence[str] = PEER_REQUIREMENTS,
    venv: Path = PEER_VENV,
    log: Callable[[str], None] = _log,
) -> PeerEnv:
    """A peer virtualenv at ``venv`` holding ``requirements``, created or completed as needed.

    Raises :class:`PeerUnavailable` when there is no Python >= 3.12, or the virtualenv cannot
    be created, or pip fails.
    """
    python = venv / "bin" / "python"
    version = probe_interpreter(python) if python.exists() else None
    if version is None or not _new_enough(version):
        if venv.exists():
            log(f"{venv} is unusable ({version or 'its python does not run'}); recreating it")
            shutil.rmtree(venv)
        found = find_interpreter()
        if found is None:
            raise PeerUnavailable(
                "no Python >= 3.12 found (tried python3.13, python3.12 on PATH, "
                "/root/.pyenv/versions/3.1[2-9]*, /usr/bin/python3.1[2-9])"
            )
        base, base_version = found
        log(f"creating {venv} with {base} (Python {base_version})")
        _run_or_raise([base, "-m", "venv", str(venv)], 300, f"{base} -m venv failed")
        version = probe_interpreter(python)
        if version is None:
            raise PeerUnavailable(f"the new virtualenv's python {python} does not run")
    names = [_split_requirement(r)[0] for r in requirements]
    missing = _missing(_installed(python, names), requirements)
    if missing:
        log(f"pip install {' '.join(missing)} into {venv}")
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        _run_or_raise([*pip, *missing], 1200, f"pip install {' '.join(missing)} failed")
    installed = _installed(python, names)
    still = _missing(installed, requirements)
    if still:
        raise PeerUnavailable(f"after pip install, still missing: {' '.join(still)}")
    packages = {name: v for name, v in installed.items() if v is not None}
    return PeerEnv(python=python, version=version, packages=packages)


def run_peer_script(env: PeerEnv, script: Path, payload: object, timeout_s: float) -> object:
    """Run ``script`` with the peer interpreter, ``payload`` as JSON on stdin; return its JSON.

    The script runs isolated (``-I``: no PYTHONPATH, no user site, not this repository on
    sys.path), so it sees only the standard library and the peers. Its stderr (progress) is
    passed through. Raises :class:`PeerUnavailable` if it fails, times out or prints no JSON.
    """
    try:
        done = subprocess.run(
            [str(env.python), "-I", str(script)],
            input=json.dumps(payload),
            stdout=subprocess.PIPE,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PeerUnavailable(f"{script.name} did not finish within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise PeerUnavailable(f"{script.name} exited with status {done.returncode}")
    try:
        result: object = json.loads(done.stdout)
    except json.JSONDecodeError as e:
        raise PeerUnavailable(f"{script.name} printed no JSON: {e}") from None
    return result
