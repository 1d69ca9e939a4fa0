"""The operator's tasks that are more than one call of a :class:`~witness.state.WitnessState`.

* :func:`init_witness` creates a witness: in a directory, ``witness.key`` (an Ed25519
  cosignature/v1 key, type 0x04), with ``mldsa`` also ``witness-mldsa.key`` (ML-DSA-44
  subtree/v1, type 0x06), both in the Go ``PRIVATE+KEY+<name>+<id>+<base64>`` format with mode
  0600, and ``witness.toml`` (mode 0600: it may hold a PostgreSQL URL) listing every setting
  (:func:`witness.config.starter_config`). It never overwrites a file (UsageError before
  writing anything) and creates the state when missing; an existing state is kept as it is.
* :func:`import_state` merges an export (the tlog-witness-state v1 format of
  :mod:`witness.sqlstate`) into a state, creating it when missing. The whole file is parsed
  and verified before the state is opened, and a failed import into a SQLite file that did not
  exist removes the files it created.
* :func:`find_evidence`, :func:`evidence_json` and :func:`evidence_files` show the kept
  evidence of a split view: one row, as a JSON object, or as the files a third party checks
  with ``tlog open`` and ``tlog check consistency`` (``request``, ``submitted.note``,
  ``proof.txt``, and ``stored.note`` when the witness had one).

Exporting is one call, :meth:`WitnessState.export_state`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tlog.cli.files import create_private
from tlog.cosignature import TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1
from tlog.encoding import MAX_INT63, b64encode
from tlog.errors import UsageError
from tlog.keys import generate_key
from tlog.note import check_key_name
from tlog.witnessproto import AddCheckpointRequest
from witness.config import CONFIG_FILE, DB_FILE, KEY_FILE, MLDSA_KEY_FILE, starter_config
from witness.open import open_state
from witness.pull import quote
from witness.sqlstate import parse_state
from witness.state import Evidence, WitnessState

__all__ = [
    "CreatedWitness",
    "evidence_files",
    "evidence_json",
    "find_evidence",
    "import_parsed",
    "import_state",
    "init_witness",
]


@dataclass(frozen=True)
class CreatedWitness:
    """What :func:`init_witness` made: the name, the vkeys (one per key, in ``keys``'s order),
    the key files, the config file and the state (``db`` the SQLite path, or ``postgres``)."""

    name: str
    vkeys: tuple[str, ...]
    keys: tuple[str, ...]
    config: str
    db: str | None
    postgres: str | None


def _path_in_config(path: str, directory: str) -> str:
    """How witness.toml names ``path``: relative when inside ``directory``, else absolute."""
    target = os.path.abspath(path)
    base = os.path.abspath(directory)
    if os.path.commonpath([target, base]) == base:
        return os.path.relpath(target, base)
    return target


def init_witness(
    name: str,
    directory: str = ".",
    *,
    db: str | None = None,
    postgres: str | None = None,
    mldsa: bool = False,
) -> CreatedWitness:
    """Create witness ``name``'s keys and config in ``directory`` and its state.

    The state is ``db`` (SQLite) or ``postgres`` (at most one given), by default ``witness.db``
    in ``directory``. ``directory`` is created when missing (mode 0700). Raises UsageError,
    writing nothing, when a file to write exists; MalformedError for a bad name.
    """
    check_key_name(name)
    if db is None and postgres is None:
        db = os.path.join(directory, DB_FILE)
    key_specs = [(os.path.join(directory, KEY_FILE), TYPE_COSIGNATURE_V1)]
    if mldsa:
        key_specs.append((os.path.join(directory, MLDSA_KEY_FILE), TYPE_SUBTREE_V1))
    config_path = os.path.join(directory, CONFIG_FILE)
    for path in [p for p, _ in key_specs] + [config_path]:
        if os.path.lexists(path):
            raise UsageError(f"{path} exists: init never overwrites a file")
    keys = [generate_key(name, t) for _, t in key_specs]
    text = starter_config(
        name,
        keys=tuple(os.path.basename(p) for p, _ in key_specs),
        db=None if db is None else _path_in_config(db, directory),
        postgres=postgres,
    )
    os.makedirs(directory, mode=0o700, exist_ok=True)
    open_state(db=db, postgres=postgres, create=True).close()
    created: list[str] = []
    try:
        for (path, _), key in zip(key_specs, keys, strict=True):
            create_private(path, (key.format() + "\n").encode("utf-8"))
            created.append(path)
        create_private(config_path, text.encode("utf-8"))
    except BaseException:
        for path in created:
            os.unlink(path)
        raise
    return CreatedWitness(
        name=name,
        vkeys=tuple(k.vkey() for k in keys),
        keys=tuple(p for p, _ in key_specs),
        config=config_path,
        db=db,
        postgres=postgres,
    )


_SQLITE_FILES = ("", "-journal", "-wal", "-shm", "-writer.lock")
"""Suffixes of the files of a SQLite state ``<db>`` (SQLite's and :mod:`witness.sqlite_state`'s)."""


def import_state(data: bytes, *, db: str | None, postgres: str | None) -> int:
    """Merge the export ``data`` into the state at ``db`` or ``postgres`` (one set), creating
    it when missing; return the number of logs in the file.

    The whole file is parsed and verified first (:func:`~witness.sqlstate.parse_state`, which
    raises MalformedError or VerificationError): a refused file creates nothing. The merge is
    :meth:`WitnessState.import_state`, one atomic write.
    """
    n = len(parse_state(data))
    import_parsed(data, db, postgres)
    return n


def import_parsed(data: bytes, db: str | None, postgres: str | None) -> None:
    """:func:`import_state` of ``data`` that the caller has parsed already."""
    # A SQLite state that did not exist: on failure, remove what this call created (a
    # backend failure after creation), as if it had never run.
    created = [] if db is None or os.path.lexists(db) else [db + s for s in _SQLITE_FILES]
    created = [p for p in created if not os.path.lexists(p)]
    try:
        state = open_state(db=db, postgres=postgres, create=True)
        try:
            state.import_state(data)  # parses it again: verifying notes is cheap here
        finally:
            state.close()
    except BaseException:
        for path in created:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        raise


def find_evidence(state: WitnessState, wanted: int, origin: str | None = None) -> Evidence:
    """Evidence row ``wanted`` (of log ``origin`` when given); UsageError when there is none."""
    found = [e for e in state.evidence(origin, MAX_INT63) if e.id == wanted]
    if not found:
        raise UsageError(f"no evidence {wanted}" + (f" for {quote(origin)}" if origin else ""))
    return found[0]


def evidence_json(e: Evidence) -> dict[str, Any]:
    """An evidence row as a JSON object: the request and the stored note in base64."""
    return {
        "id": e.id,
        "origin": e.origin,
        "reason": e.reason,
        "received_at": e.received_at,
        "request": b64encode(e.request),
        "stored_note": None if e.stored_note is None else b64encode(e.stored_note),
    }


def evidence_files(e: Evidence, out: str) -> Sequence[str]:
    """Write the parts of an evidence row as files in directory ``out`` (created if missing,
    mode 0700; files there are replaced); return their paths. Raises OSError."""
    req = AddCheckpointRequest.parse(e.request)
    parts = {
        "request": e.request,
        "submitted.note": req.checkpoint,
        "proof.txt": b"".join(b64encode(h).encode() + b"\n" for h in req.proof),
    }
    if e.stored_note is not None:
        parts["stored.note"] = e.stored_note
    os.makedirs(out, mode=0o700, exist_ok=True)
    for name, data in parts.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    return [os.path.join(out, name) for name in parts]
