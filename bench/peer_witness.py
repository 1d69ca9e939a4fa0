"""Runs aics-witness 0.1.0 as a server. Run INSIDE ``.venv-peers`` by :mod:`bench.witness_bench`.

Never imported by the project: it needs Python >= 3.12 with aics-witness installed, and only the
standard library besides (aics-witness is loaded with :func:`importlib.import_module` so that
type checking this file does not need it).

Input, one JSON object on stdin::

    {"dir": "/tmp/.../aics",                a new, empty directory for config, key and database
     "name": "bench.example/witness",       the witness's cosigner name
     "listen": "127.0.0.1:PORT",            where to serve
     "logs": [["<origin>", "<vkey>"], ...]} the logs to trust (Ed25519 vkeys, type 0x01)

Procedure: exactly what an operator does, through aics-witness's own command line
(``aics_witness.cli.main``): ``init --name --listen`` (creates ``witness.json``, the key file
with mode 0600 and the database ``witness.db``: SQLite, WAL, ``synchronous=FULL``, the only mode
it has), one ``add-log`` per log, then ``serve``, which logs at its default level (INFO) to
stderr and runs until SIGTERM.

Output: one JSON line on stdout before ``serve`` starts, ``{"vkey": the witness vkey printed by
init, "aics_witness": version, "aics_tlog": version, "python": version}``; then nothing more on
stdout. The exit status is ``serve``'s; a failing setup step exits with 2 and says why on stderr.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import json
import platform
import sys
from pathlib import Path
from typing import Any


def _log(message: str) -> None:
    print(f"  [peer_witness] {message}", file=sys.stderr, flush=True)


def _cli(main: Any, argv: list[str]) -> str:
    """Run one aics-witness command; its stdout, which must not reach ours, is returned."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    if status != 0:
        raise RuntimeError(f"aics-witness {argv[0]} exited with status {status}")
    return out.getvalue()


def main() -> int:
    job: dict[str, Any] = json.load(sys.stdin)
    directory = Path(job["dir"])
    config = str(directory / "witness.json")
    cli = importlib.import_module("aics_witness.cli")
    try:
        printed = _cli(
            cli.main, ["init", "--config", config, "--name", job["name"], "--listen", job["listen"]]
        )
        vkey = printed.strip().splitlines()[-1]
        for origin, log_vkey in job["logs"]:
            _cli(cli.main, ["add-log", "--config", config, "--origin", origin, "--vkey", log_vkey])
    except Exception as e:
        _log(f"setup failed: {type(e).__name__}: {e}")
        return 2
    ready = {
        "vkey": vkey,
        "aics_witness": importlib.metadata.version("aics-witness"),
        "aics_tlog": importlib.metadata.version("aics-tlog"),
        "python": platform.python_version(),
    }
    print(json.dumps(ready), flush=True)
    status: int = cli.main(["serve", "--config", config])
    return status


if __name__ == "__main__":
    sys.exit(main())
