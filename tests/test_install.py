"""A real install of the project, as a user makes one: pip into a fresh virtual environment.

pyproject.toml's base dependencies give the formats and the verifier, its extras the other roles
(tlog/extras.py). These tests build and install a copy of the checkout (not editable: the wheel
pip builds, its C extension compiled, with the dependencies its metadata declares) into one venv
per module, and check, in this order:

* the base install (``pip install PATH``): no module of an extra can be imported;
  ``tlog-verify`` and ``tlog`` run; a real checkpoint (sum.golang.org's, from testdata/) and an
  export made there with ``tlog-store`` on SQLite verify, and running the verifier leaves every
  extra's module out of ``sys.modules``;
* each verb that needs an extra says which, in one line, with exit status 2;
* ``pip install 'PATH[witness]'`` into the same venv: ``tlog-witness`` creates a witness and
  ``serve --check`` builds its server (aiohttp).

pip needs PyPI (or its cache) for the dependencies and for setuptools, which builds the wheel; a
failed install fails the module's tests with pip's last lines. The first run downloads; later
ones take pip's cache (a few seconds each install). Every test after the base install's relies
on the order of this file: the witness extra is installed last. Under pytest-xdist each worker
that gets tests of this module builds its own venv, which keeps that order per worker.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tlog.extras import DISTRIBUTION, EXTRAS

ROOT = Path(__file__).resolve().parent.parent
SUMDB = ROOT / "testdata" / "sum.golang.org"
CHECKPOINT = SUMDB / "checkpoint-6476701.txt"

EXTRA_MODULES = sorted(set().union(*EXTRAS.values()))
"""Every module an extra brings (aiohttp, psycopg, requests, uvloop)."""

BASE_DISTRIBUTIONS = {"cryptography", "pynacl", "orjson"}
"""What tlog and the verifier import beside the standard library (tests/test_layering.py)."""

PIP_TIMEOUT = 600
"""Seconds for one pip install: a cold cache downloads cryptography and aiohttp's wheels."""

COMMAND_TIMEOUT = 120

# The build's inputs only: no venv, no build products of an editable install (the compiled
# extension among them: the wheel must compile its own), no caches, no VCS.
_NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".venv*",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.so",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "testdata",
)


def _requirement_name(requirement: str) -> str:
    """The distribution a PEP 508 requirement names, normalised (``psycopg[binary]>=3.1`` →
    ``psycopg``)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


# --- the metadata (no install) ---------------------------------------------------------------


def _pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def test_the_extras_of_pyproject_are_those_of_tlog_extras() -> None:
    # The distributions of these extras are named as their modules (psycopg's "binary" is its
    # own extra): the table the commands' messages come from is the table pip installs.
    optional = _pyproject()["optional-dependencies"]
    assert isinstance(optional, dict)
    for extra, modules in EXTRAS.items():
        assert {_requirement_name(r) for r in optional[extra]} == modules, extra
    assert optional["all"] == [f"{DISTRIBUTION}[{','.join(EXTRAS)}]"]


def test_the_base_dependencies_are_the_formats_and_the_verifiers() -> None:
    dependencies = _pyproject()["dependencies"]
    assert isinstance(dependencies, list)
    assert {_requirement_name(r) for r in dependencies} == BASE_DISTRIBUTIONS


# --- the fresh install -----------------------------------------------------------------------


@dataclass(frozen=True)
class Venv:
    """A fresh venv with a copy of the checkout (``src``) installed, and a scratch directory
    (``work``) to run commands in, outside the checkout."""

    path: Path
    src: Path
    work: Path

    def bin(self, name: str) -> str:
        return str(self.path / "bin" / name)

    def run(
        self, argv: Sequence[str], cwd: Path | None = None, timeout: float = COMMAND_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` (its first item a script of the venv: ``tlog-verify``, ``python``)."""
        return subprocess.run(
            [self.bin(argv[0]), *argv[1:]],
            cwd=cwd or self.work,
            env=_env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )

    def pip_install(self, target: str) -> None:
        """``pip install TARGET``; a failure fails the test with pip's last lines."""
        proc = self.run(["python", "-m", "pip", "install", "--quiet", target], timeout=PIP_TIMEOUT)
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if "is ignored" not in ln]
            pytest.fail(
                f"pip install {target} failed with status {proc.returncode} (it needs PyPI or "
                "pip's cache, for the dependencies and for setuptools):\n" + "\n".join(lines[-20:]),
                pytrace=False,
            )


def _env() -> dict[str, str]:
    """This environment without what would make the venv see another one or the checkout
    (PYTHONPATH, VIRTUAL_ENV) or change a command's state (TLOG_*)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"} and not k.startswith("TLOG_")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    base = tmp_path_factory.mktemp("install")
    src, path, work = base / "src", base / "venv", base / "work"
    shutil.copytree(ROOT, src, ignore=_NOT_COPIED)
    work.mkdir()
    made = subprocess.run(
        [sys.executable, "-m", "venv", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=COMMAND_TIMEOUT,
    )
    assert made.returncode == 0, made.stderr
    v = Venv(path, src, work)
    v.pip_install(str(src))
    yield v


def _importable(venv: Venv, modules: Sequence[str]) -> dict[str, bool]:
    code = (
        "import importlib.util, json, sys; "
        "print(json.dumps({m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))"
    )
    proc = venv.run(["python", "-c", code, *modules])
    assert proc.returncode == 0, proc.stderr
    found: dict[str, bool] = json.loads(proc.stdout)
    return found


def test_the_base_install_has_no_module_of_an_extra(venv: Venv) -> None:
    assert _importable(venv, EXTRA_MODULES) == dict.fromkeys(EXTRA_MODULES, False)
    base = ["tlog", "verifier", "nacl", "cryptography", "orjson"]
    assert _importable(venv, base) == dict.fromkeys(base, True)
    # The installed package, not the checkout: the run is outside it, from the venv's copy.
    proc = venv.run(["python", "-c", "import tlog; print(tlog.__file__)"])
    assert proc.stdout.startswith(str(venv.path)), proc.stdout


def test_tlog_verify_and_tlog_run(venv: Venv) -> None:
    for command in ("tlog-verify", "tlog"):
        proc = venv.run([command, "--help"])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"usage: {command} "), proc.stdout


def test_tlog_verify_verifies_a_published_checkpoint(venv: Venv) -> None:
    vkey = (SUMDB / "vkey.txt").read_text(encoding="utf-8").strip()
    proc = venv.run(["tlog-verify", "checkpoint", "--log-vkey", vkey, str(CHECKPOINT)])
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("tlog-verify checkpoint: VALID\n"), proc.stdout
    assert "size                6476701\n" in proc.stdout
    # One byte of the signed text changed: the signature no longer verifies.
    forged = venv.work / "forged-checkpoint"
    text = CHECKPOINT.read_text(encoding="utf-8")
    forged.write_text(text.replace("\n6476701\n", "\n6476702\n", 1), encoding="utf-8")
    proc = venv.run(["tlog-verify", "checkpoint", "--log-vkey", vkey, str(forged)])
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("tlog-verify checkpoint: INVALID\n"), proc.stdout
    assert "does not verify" in proc.stderr


_VERIFY_IN_PROCESS = """
import contextlib, io, json, sys
from verifier.cli import main
out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
with contextlib.redirect_stdout(out):
    status = main(["export", "--log-vkey", sys.argv[2], "--json", sys.argv[1]])
out.flush()
report = json.loads(out.buffer.getvalue())
print(json.dumps({
    "status": status,
    "verdict": report["verdict"],
    "records": report["facts"]["records"],
    "loaded": sorted(m for m in sys.argv[3:] if m in sys.modules),
}))
"""


def test_an_export_made_on_the_base_install_verifies_loading_no_extra(
    venv: Venv, tmp_path: Path
) -> None:
    # tlog-store on SQLite needs no extra: only publishing to witnesses does.
    db = ["--db", str(tmp_path / "journal.db")]
    steps = [
        ["init", "--origin", "example.com/journal"],
        ["acquire", "run-1", "--owner", "w1", "--ttl", "60"],
        ["append", "run-1", "--epoch", "1", "--kind", "Started", "--data", '{"n": 1}'],
        ["seal", "run-1", "--epoch", "1", "--outcome", "succeeded"],
        ["checkpoint"],
        ["export", "--out", str(tmp_path / "journal.export")],
        ["vkey"],
    ]
    for step in steps:
        proc = venv.run(["tlog-store", *step, *db])
        assert (proc.returncode, proc.stderr) == (0, ""), step
    vkey = proc.stdout.strip()
    proc = venv.run(
        [
            "python",
            "-c",
            _VERIFY_IN_PROCESS,
            str(tmp_path / "journal.export"),
            vkey,
            *EXTRA_MODULES,
        ]
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "status": 0,
        "verdict": "valid",
        "records": 2,
        "loaded": [],
    }


_WITNESS_VKEY = "w.example/w1+3cb41c76+BKO2E3rFnG1sRxOGrlfz2Ya4SxSxMdnomtPcRLgZUUDW"

_NEEDS_AN_EXTRA = [
    (["tlog-witness", "serve", "--db", "{tmp}/witness.db"], "witness", "aiohttp"),
    (
        ["tlog-witness", "conformance", "http://127.0.0.1:9/", "--log-key", "k"],
        "witness",
        "requests",
    ),
    (
        ["tlog-witness", "list-logs", "--postgres", "postgresql://127.0.0.1/x"],
        "postgres",
        "psycopg",
    ),
    (
        ["tlog-store", "head", "run-1", "--postgres", "postgresql://127.0.0.1/x"],
        "postgres",
        "psycopg",
    ),
    (
        ["tlog-store", "publish", "--db", "{tmp}/journal.db", "--witness", "http://127.0.0.1:9/="],
        "store",
        "requests",
    ),
    (["tlog-store", "serve", "--db", "{tmp}/journal.db"], "store", "aiohttp"),
]


@pytest.mark.parametrize(
    ("argv", "extra", "module"),
    _NEEDS_AN_EXTRA,
    ids=lambda x: " ".join(x) if isinstance(x, list) else str(x),
)
def test_a_verb_that_needs_an_extra_names_it(
    venv: Venv, tmp_path: Path, argv: list[str], extra: str, module: str
) -> None:
    if argv[:2] in (["tlog-store", "publish"], ["tlog-store", "serve"]):
        init = venv.run(["tlog-store", "init", "--db", f"{tmp_path}/journal.db", "--origin", "x.y"])
        assert init.returncode == 0, init.stderr
    if argv[:2] == ["tlog-store", "publish"]:
        argv = [*argv[:-1], argv[-1] + _WITNESS_VKEY]
    proc = venv.run([a.replace("{tmp}", str(tmp_path)) for a in argv], cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"{argv[0]}: {argv[1]}: this command needs the '{extra}' extra: "
        f"pip install 'tlog-toolkit[{extra}]' (missing module {module})\n"
    )


# Last in this file: it changes the module's venv.
def test_the_witness_extra_gives_a_working_witness(venv: Venv, tmp_path: Path) -> None:
    venv.pip_install(f"{venv.src}[witness]")
    expected = {"aiohttp": True, "requests": True, "psycopg": False}
    if sys.platform != "win32" and sys.implementation.name == "cpython":
        expected["uvloop"] = True
    assert _importable(venv, list(expected)) == expected
    proc = venv.run(["tlog-witness", "--help"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: tlog-witness "), proc.stdout
    proc = venv.run(["tlog-witness", "init", "--name", "witness.example/w1"], cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, "")
    vkey = proc.stdout.strip()
    assert vkey.startswith("witness.example/w1+"), vkey
    assert {"witness.key", "witness.toml", "witness.db"} <= {p.name for p in tmp_path.iterdir()}
    # serve --check builds the server (aiohttp) on the state and keys, then exits.
    proc = venv.run(["tlog-witness", "serve", "--check", "--config", "witness.toml"], cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert f"vkey {vkey}\n" in proc.stdout
    # PostgreSQL is its own extra still.
    proc = venv.run(["tlog-witness", "list-logs", "--postgres", "postgresql://127.0.0.1/x"])
    assert proc.returncode == 2
    assert "needs the 'postgres' extra" in proc.stderr
