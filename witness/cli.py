"""The ``tlog-witness`` command: run a C2SP tlog-witness and manage its state from the shell.

Verbs::

    tlog-witness init --name NAME [--dir DIR] [--mldsa] [--json]
    tlog-witness vkey [--key FILE]...
    tlog-witness add-log ORIGIN --key VKEY [--key VKEY]... [--qpd N]
    tlog-witness add-key ORIGIN VKEY
    tlog-witness disable-log ORIGIN
    tlog-witness enable-log ORIGIN
    tlog-witness list-logs [--json]
    tlog-witness pull-logs FILE|URL [--dry-run] [--timeout SECONDS]
    tlog-witness evidence [--origin ORIGIN] [--limit N] [--json] [--show ID]
    tlog-witness export-state [--out FILE]
    tlog-witness import-state FILE
    tlog-witness serve [--listen HOST:PORT] [--name NAME] [--key FILE]... [--check] [...]

State options (every verb but ``vkey``): ``--db PATH`` (a SQLite file; environment variable
``TLOG_WITNESS_DB``) or ``--postgres URL`` (a libpq URL or connection string;
``TLOG_WITNESS_POSTGRES``). ``--config FILE`` (``TLOG_WITNESS_CONFIG``; every verb but
``init``) reads a witness.toml (:mod:`witness.config`) whose ``db``/``postgres`` and ``keys``
settings the other verbs use too. The state is the first of: the flag, the environment, the
file, ``witness.db`` in the file's directory (or the current directory without a file). Every
verb but ``init`` and ``import-state`` refuses a SQLite path that does not exist rather than
create an empty state there; ``import-state`` parses and verifies its whole file before it opens
(or creates) the state, and a failed import into a SQLite file that did not exist removes the
files it created.

``init`` writes, in ``--dir`` (default: the current directory), ``witness.key`` (an Ed25519
cosignature/v1 key, type 0x04), with ``--mldsa`` also ``witness-mldsa.key`` (ML-DSA-44
subtree/v1, type 0x06), both in the Go ``PRIVATE+KEY+<name>+<id>+<base64>`` format with mode
0600, and ``witness.toml`` (mode 0600: it may hold a PostgreSQL URL), listing every setting;
it never overwrites a file (exit 2 before writing anything), creates the state when missing
(``witness.db`` in the directory unless the flags or environment name another) and prints the
witness's vkeys, one per line: what log operators and policy files need.

Input formats, parsed strictly: key files (:mod:`tlog.keys`); vkeys (``NAME+ID+BASE64`` of
type 0x01 or 0x06 for a log's key); origins (non-empty UTF-8 without control characters, at
most 512 bytes); numbers (``--qpd``, ``--limit``, ``--show``, ``--max-body``): canonical
decimals; seconds (``--timeout``, ``--read-timeout``, ...): ``10`` or ``2.5``; the logs/v0 list
and witness.toml (:mod:`witness.config`); the state file (:mod:`witness.sqlstate`).

``pull-logs`` reads a transparency-dev/witness-network logs/v0 list from a file or an
``http(s)://`` URL (fetched with ``requests``, one timeout, at most :data:`MAX_LIST_SIZE`
bytes). It adds the logs it does not follow, adds a listed key that an existing log lacks,
and sets a log's qpd to the listed one. It never removes a log or a key and never enables a
disabled log (its keys and qpd are still updated). Each change is written on its own and
re-running converges, so an interrupted pull is safe to repeat. It prints one line per change
and a summary; ``--dry-run`` writes nothing.

Exit status (:func:`main` is the one place that maps exceptions to statuses):

==  ===================================================================================
 0  success
 1  verification failure: a cosigned note in an imported state does not verify with its
    log's keys; the state holds data of the wrong shape (CorruptStateError)
 2  unusable input or usage: malformed data, bad arguments, unreadable file, a refused
    change (an origin already configured, an import that would move a log backwards),
    a port that cannot be bound
 4  backend trouble: the database failed (nothing written), or a COMMIT got no verdict (the
    write may or may not have landed: read back before retrying); a log list that cannot be
    fetched (network, timeout, HTTP status other than 200)
==  ===================================================================================

Every failure prints exactly one line on standard error, ``tlog-witness: <verb>: <message>``,
and never a traceback. A closed standard output ends the command silently with status 2.
``serve`` runs until SIGTERM or SIGINT, then lets requests in flight finish (at most
``shutdown_timeout`` seconds) and exits 0; a SIGINT at any other moment exits 130.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tlog.cli import files as clifiles
from tlog.cli import run as clirun
from tlog.cli.files import (
    create_private,
    input_name,
    is_stdin,
    output_file,
    read_input,
    read_key_file,
)
from tlog.cli.run import Exit, add_verb, command_parser, decimal_arg, run, utf8_arg, write_stdout
from tlog.cosignature import (
    TYPE_COSIGNATURE_V1,
    TYPE_SUBTREE_V1,
    CosignatureV1Signer,
    SubtreeV1Signer,
)
from tlog.encoding import MAX_INT63, b64encode
from tlog.errors import MalformedError, TlogError, UsageError
from tlog.keys import TYPE_NAMES, SignerKey, generate_key
from tlog.note import check_key_name
from tlog.witnessproto import AddCheckpointRequest
from witness.config import (
    CONFIG_FILE,
    DB_FILE,
    DEFAULT_CONFIG_TTL,
    DEFAULT_LIMITS,
    DEFAULT_LISTEN,
    DEFAULT_MAX_BODY,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_SHUTDOWN_TIMEOUT,
    DEFAULT_WORKERS,
    KEY_FILE,
    LIMIT_COUNTS,
    LIMIT_SECONDS,
    MLDSA_KEY_FILE,
    SETTINGS,
    FileConfig,
    Limits,
    ListedLog,
    check_prefix,
    format_listen,
    load_config,
    parse_listen,
    parse_log_list,
    parse_max_body,
    parse_seconds,
    parse_workers,
    starter_config,
)
from witness.open import open_state
from witness.sqlstate import (
    BackendError,
    CommitUnknownError,
    CorruptStateError,
    StateError,
    parse_state,
)
from witness.state import Evidence, WitnessState

if TYPE_CHECKING:
    from aiohttp import web

EXIT_OK = clirun.EXIT_OK
EXIT_UNVERIFIED = clirun.EXIT_UNVERIFIED
EXIT_BAD_INPUT = clirun.EXIT_BAD_INPUT
EXIT_BACKEND = 4
EXIT_INTERRUPTED = 130  # the shell's 128 + SIGINT

ENV_DB = "TLOG_WITNESS_DB"
ENV_POSTGRES = "TLOG_WITNESS_POSTGRES"
ENV_CONFIG = "TLOG_WITNESS_CONFIG"

MAX_KEY_FILE_SIZE = clifiles.MAX_KEY_FILE_SIZE

MAX_LIST_SIZE = 256 << 20
"""Largest logs/v0 list read (a million-log list is about 150 MB)."""

DEFAULT_FETCH_TIMEOUT = 30.0
"""Seconds ``pull-logs`` waits for the list's server (to connect, and between bytes)."""

DEFAULT_EVIDENCE_LIMIT = 100

PROG = "tlog-witness"

Cosigner = CosignatureV1Signer | SubtreeV1Signer


class FetchError(TlogError):
    """A log list could not be fetched from its URL (exit 4)."""


# --- input -----------------------------------------------------------------------------------


def _nonempty(text: str, what: str) -> str:
    if not utf8_arg(text, what):
        raise UsageError(f"{what} is empty")
    return text


def _quote(origin: str) -> str:
    """An origin in human output: JSON-quoted, since origins may hold spaces."""
    return json.dumps(origin, ensure_ascii=False)


def _time(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return str(seconds)


# --- output ----------------------------------------------------------------------------------


def _write_json_line(obj: object) -> None:
    write_stdout(json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")


# --- configuration, state and keys -------------------------------------------------------------


def _config(args: argparse.Namespace) -> FileConfig | None:
    """The witness.toml named by --config, else by TLOG_WITNESS_CONFIG, else none."""
    path = getattr(args, "config", None)
    if path is None:
        path = os.environ.get(ENV_CONFIG) or None
    if path is None:
        return None
    return load_config(_nonempty(path, "--config"))


def _base_dir(cfg: FileConfig | None) -> str:
    return "." if cfg is None else cfg.base_dir


def _location(
    args: argparse.Namespace, cfg: FileConfig | None, default_dir: str | None = None
) -> tuple[str | None, str | None]:
    """(db, postgres): the flag, the environment, the file, the default; exactly one set."""
    if args.db is not None:
        return _nonempty(args.db, "--db"), None
    if args.postgres is not None:
        return None, _nonempty(args.postgres, "--postgres")
    env_db = os.environ.get(ENV_DB) or None
    env_pg = os.environ.get(ENV_POSTGRES) or None
    if env_db is not None and env_pg is not None:
        raise UsageError(
            f"both {ENV_DB} and {ENV_POSTGRES} are set: choose with --db or --postgres"
        )
    if env_db is not None or env_pg is not None:
        return env_db, env_pg
    if cfg is not None and (cfg.db is not None or cfg.postgres is not None):
        return cfg.db, cfg.postgres
    return os.path.join(default_dir or _base_dir(cfg), DB_FILE), None


def _existing(db: str | None) -> None:
    """Refuse a SQLite path with no file: opening it would create an empty state there."""
    if db is not None and not os.path.exists(db):
        raise UsageError(f"no witness state at {db} (create one with '{PROG} init')")


@contextlib.contextmanager
def _open(args: argparse.Namespace) -> Iterator[WitnessState]:
    """The existing state the arguments name (see :func:`_location`), closed afterwards."""
    db, pg = _location(args, _config(args))
    _existing(db)
    state = open_state(db=db, postgres=pg, create=False)
    try:
        yield state
    finally:
        state.close()


def _key_paths(args: argparse.Namespace, cfg: FileConfig | None) -> list[str]:
    """The witness's key files: --key, else the file's ``keys``, else the defaults."""
    if args.key:
        return [_nonempty(p, "--key") for p in args.key]
    if cfg is not None and cfg.keys is not None:
        return list(cfg.keys)
    base = _base_dir(cfg)
    paths = [os.path.join(base, KEY_FILE)]
    mldsa = os.path.join(base, MLDSA_KEY_FILE)
    if os.path.exists(mldsa):
        paths.append(mldsa)
    return paths


def _read_witness_key(path: str) -> SignerKey:
    """A witness signer key file: type 0x04 (cosignature/v1) or 0x06 (ML-DSA-44)."""
    key = read_key_file(path)
    if key.key_type not in (TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1):
        kind = TYPE_NAMES.get(key.key_type, "unknown")
        raise UsageError(
            f"key file {path} holds a key of type {kind} (0x{key.key_type:02x}); a witness signs"
            " with a cosignature/v1 (0x04) or ML-DSA-44 (0x06) key: make them with"
            f" '{PROG} init' or 'tlog keygen --type cosignature/v1'"
        )
    return key


def _witness_keys(paths: Sequence[str], name: str | None) -> tuple[str, list[SignerKey]]:
    """Read the key files; all must carry one name (``name`` when given). Returns the name."""
    keys = [_read_witness_key(p) for p in paths]
    want = name if name is not None else keys[0].name
    for path, key in zip(paths, keys, strict=True):
        if key.name != want:
            what = "the witness is named" if name is not None else f"{paths[0]} is named"
            raise UsageError(f"key file {path} is named {key.name!r}, {what} {want!r}")
    return want, keys


def _cosigner(key: SignerKey) -> Cosigner:
    if key.key_type == TYPE_COSIGNATURE_V1:
        return CosignatureV1Signer(key.name, key.secret)
    return SubtreeV1Signer(key.name, key.secret)


# --- init, vkey ------------------------------------------------------------------------------


def _path_in_config(path: str, directory: str) -> str:
    """How witness.toml names ``path``: relative when inside ``directory``, else absolute."""
    target = os.path.abspath(path)
    base = os.path.abspath(directory)
    if os.path.commonpath([target, base]) == base:
        return os.path.relpath(target, base)
    return target


def _cmd_init(args: argparse.Namespace) -> int:
    name = utf8_arg(args.name, "--name")
    check_key_name(name)
    directory = _nonempty(args.dir, "--dir")
    db, pg = _location(args, None, default_dir=directory)
    key_specs = [(os.path.join(directory, KEY_FILE), TYPE_COSIGNATURE_V1)]
    if args.mldsa:
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
        postgres=pg,
    )
    os.makedirs(directory, mode=0o700, exist_ok=True)
    open_state(db=db, postgres=pg, create=True).close()
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
    vkeys = [k.vkey() for k in keys]
    if args.json:
        _write_json_line(
            {
                "name": name,
                "vkeys": vkeys,
                "keys": [p for p, _ in key_specs],
                "config": config_path,
                "db": db,
                "postgres": pg is not None,
            }
        )
    else:
        write_stdout("".join(v + "\n" for v in vkeys))
    return EXIT_OK


def _cmd_vkey(args: argparse.Namespace) -> int:
    cfg = _config(args)
    _, keys = _witness_keys(_key_paths(args, cfg), cfg.name if cfg else None)
    write_stdout("".join(k.vkey() + "\n" for k in keys))
    return EXIT_OK


# --- logs --------------------------------------------------------------------------------------


def _origin_arg(text: str) -> str:
    return _nonempty(text, "ORIGIN")


def _cmd_add_log(args: argparse.Namespace) -> int:
    origin = _origin_arg(args.origin)
    vkeys = tuple(_nonempty(k, "--key") for k in args.key)
    qpd = None if args.qpd is None else decimal_arg(args.qpd, "--qpd", 1)
    with _open(args) as state:
        state.add_log(origin, vkeys, qpd)
    write_stdout(
        f"added {_quote(origin)} ({len(set(vkeys))} key{'s' if len(set(vkeys)) > 1 else ''})\n"
    )
    return EXIT_OK


def _cmd_add_key(args: argparse.Namespace) -> int:
    origin = _origin_arg(args.origin)
    vkey = _nonempty(args.vkey, "VKEY")
    with _open(args) as state:
        config = state.log(origin)
        if config is None:
            raise UsageError(f"log {_quote(origin)} is not configured (add it with add-log)")
        if vkey in config.keys:
            write_stdout(f"{_quote(origin)} already trusts that key\n")
            return EXIT_OK
        state.add_key(origin, vkey)
    write_stdout(f"key added to {_quote(origin)}\n")
    return EXIT_OK


def _set_disabled(args: argparse.Namespace, disabled: bool) -> int:
    origin = _origin_arg(args.origin)
    with _open(args) as state:
        config = state.log(origin)
        if config is None:
            raise UsageError(f"log {_quote(origin)} is not configured")
        state.set_disabled(origin, disabled)
    write_stdout(f"{'disabled' if disabled else 'enabled'} {_quote(origin)}\n")
    return EXIT_OK


def _cmd_disable_log(args: argparse.Namespace) -> int:
    return _set_disabled(args, True)


def _cmd_enable_log(args: argparse.Namespace) -> int:
    return _set_disabled(args, False)


def _cmd_list_logs(args: argparse.Namespace) -> int:
    with _open(args) as state:
        configs = state.logs()
        latest = {c.origin: c for c in state.all_latest()}
    out = []
    for config in configs:
        c = latest.get(config.origin)
        if args.json:
            obj = {
                "origin": config.origin,
                "keys": list(config.keys),
                "qpd": config.qpd,
                "disabled": config.disabled,
                "size": None if c is None else c.size,
                "root": None if c is None else b64encode(c.root),
                "updated_at": None if c is None else c.updated_at,
            }
            out.append(json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")
            continue
        size = "never cosigned" if c is None else f"size {c.size}"
        when = "" if c is None else f" updated {_time(c.updated_at)}"
        qpd = "-" if config.qpd is None else str(config.qpd)
        state_text = "disabled" if config.disabled else "enabled"
        out.append(f"{_quote(config.origin)} {state_text} {size}{when} qpd {qpd}\n")
        out.extend(f"  key {k}\n" for k in config.keys)
    write_stdout("".join(out))
    return EXIT_OK


# --- pull-logs -----------------------------------------------------------------------------


def _fetch(url: str, timeout: float) -> bytes:
    """GET a log list: status 200, at most MAX_LIST_SIZE bytes (FetchError otherwise)."""
    import requests  # noqa: PLC0415 - only this verb needs it

    try:
        with requests.get(url, timeout=timeout, stream=True) as r:
            if r.status_code != 200:
                raise FetchError(f"{url}: HTTP status {r.status_code}")
            chunks: list[bytes] = []
            total = 0
            for chunk in r.iter_content(1 << 16):
                total += len(chunk)
                if total > MAX_LIST_SIZE:
                    raise MalformedError(f"{url} is larger than {MAX_LIST_SIZE} bytes")
                chunks.append(chunk)
    except requests.RequestException as e:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FetchError(f"{url}: {type(e).__name__}: {detail}") from None
    return b"".join(chunks)


@dataclass
class _PullSummary:
    added: int = 0
    keys: int = 0
    qpds: int = 0
    unchanged: int = 0
    skipped: int = 0


def _pull_one(
    state: WitnessState, e: ListedLog, dry_run: bool, summary: _PullSummary, out: list[str]
) -> None:
    config = state.log(e.origin)
    if config is None:
        if not dry_run:
            try:
                state.add_log(e.origin, (e.vkey,), e.qpd)
            except UsageError:
                # Another process added it since we looked: treat it as an existing log.
                config = state.log(e.origin)
                if config is None:
                    raise
        if config is None:
            summary.added += 1
            out.append(f"added {_quote(e.origin)}: qpd {e.qpd}, key {e.vkey}\n")
            return
    note = " (disabled, stays disabled)" if config.disabled else ""
    changed = False
    if e.vkey not in config.keys:
        if not dry_run:
            state.add_key(e.origin, e.vkey)
        summary.keys += 1
        changed = True
        out.append(f"new key for {_quote(e.origin)}: {e.vkey}{note}\n")
    if config.qpd != e.qpd:
        if not dry_run:
            state.set_qpd(e.origin, e.qpd)
        summary.qpds += 1
        changed = True
        old = "-" if config.qpd is None else str(config.qpd)
        out.append(f"qpd of {_quote(e.origin)}: {old} -> {e.qpd}{note}\n")
    if not changed:
        summary.unchanged += 1


def _cmd_pull_logs(args: argparse.Namespace) -> int:
    source = _nonempty(args.source, "FILE|URL")
    timeout = parse_seconds(args.timeout, "--timeout", positive=True)
    if source.startswith(("http://", "https://")):
        data = _fetch(source, timeout)
    else:
        data = read_input(source, MAX_LIST_SIZE)
    entries = parse_log_list(data, input_name(source))
    summary = _PullSummary()
    with _open(args) as state:
        for e in entries:
            out: list[str] = []
            if e.unsupported is not None:
                summary.skipped += 1
                out.append(f"skipped {_quote(e.origin)} (line {e.line}): {e.unsupported}\n")
            else:
                _pull_one(state, e, args.dry_run, summary, out)
            if out:
                write_stdout("".join(out))
    s = summary
    write_stdout(
        f"{s.added} added, {s.keys} keys added, {s.qpds} quotas changed, {s.unchanged}"
        f" unchanged, {s.skipped} skipped{' (dry run: nothing written)' if args.dry_run else ''}\n"
    )
    return EXIT_OK


# --- evidence, export, import ----------------------------------------------------------------


def _evidence_json(e: Evidence) -> dict[str, Any]:
    return {
        "id": e.id,
        "origin": e.origin,
        "reason": e.reason,
        "received_at": e.received_at,
        "request": b64encode(e.request),
        "stored_note": None if e.stored_note is None else b64encode(e.stored_note),
    }


def _cmd_evidence(args: argparse.Namespace) -> int:
    origin = None if args.origin is None else _origin_arg(args.origin)
    if args.show is not None:
        wanted = decimal_arg(args.show, "--show", 1)
        with _open(args) as state:
            found = [e for e in state.evidence(origin, MAX_INT63) if e.id == wanted]
        if not found:
            raise UsageError(f"no evidence {wanted}" + (f" for {_quote(origin)}" if origin else ""))
        if args.out is not None:
            _evidence_files(found[0], _nonempty(args.out, "--out"))
        elif args.json:
            _write_json_line(_evidence_json(found[0]))
        else:
            write_stdout(found[0].request)
        return EXIT_OK
    if args.out is not None:
        raise UsageError("--out needs --show ID")
    limit = decimal_arg(args.limit, "--limit", 1)
    with _open(args) as state:
        items = state.evidence(origin, limit)
    if args.json:
        write_stdout("".join(json.dumps(_evidence_json(e), sort_keys=True) + "\n" for e in items))
    else:
        write_stdout(
            "".join(f"{e.id} {_time(e.received_at)} {_quote(e.origin)} {e.reason}\n" for e in items)
        )
    return EXIT_OK


def _evidence_files(e: Evidence, out: str) -> None:
    """The parts of an evidence row as files in ``out`` (created if missing): what a third
    party needs to check the fork with ``tlog open`` and ``tlog check consistency``."""
    req = AddCheckpointRequest.parse(e.request)
    parts = {
        "request": e.request,
        "submitted.note": req.checkpoint,
        "proof.txt": b"".join(b64encode(h).encode() + b"\n" for h in req.proof),
    }
    if e.stored_note is not None:
        parts["stored.note"] = e.stored_note
    try:
        os.makedirs(out, mode=0o700, exist_ok=True)
        for name, data in parts.items():
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
    except OSError as err:
        raise UsageError(f"--out {out}: {err.strerror or err}") from None
    write_stdout("".join(f"{os.path.join(out, name)}\n" for name in parts))


def _cmd_export_state(args: argparse.Namespace) -> int:
    with _open(args) as state:
        data = state.export_state()
    if is_stdin(args.out):
        write_stdout(data)
    else:
        with output_file(_nonempty(args.out, "--out"), ".tlog-witness-", name_path=True) as f:
            f.write(data)
    return EXIT_OK


_SQLITE_FILES = ("", "-journal", "-wal", "-shm", "-writer.lock")
"""Suffixes of the files of a SQLite state ``<db>`` (SQLite's and :mod:`witness.sqlite_state`'s)."""


def _cmd_import_state(args: argparse.Namespace) -> int:
    data = read_input(_nonempty(args.file, "FILE"))
    # Parse and verify the whole file before touching the state: a refused file creates
    # nothing.
    entries = parse_state(data)
    db, pg = _location(args, _config(args))
    # A SQLite state that did not exist: on failure, remove what this invocation created (a
    # backend failure after creation), as if the command had never run.
    created = [] if db is None or os.path.lexists(db) else [db + s for s in _SQLITE_FILES]
    created = [p for p in created if not os.path.lexists(p)]
    try:
        state = open_state(db=db, postgres=pg, create=True)
        try:
            state.import_state(data)  # parses it again: verifying notes is cheap here
        finally:
            state.close()
    except BaseException:
        for path in created:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        raise
    write_stdout(f"imported {len(entries)} log{'' if len(entries) == 1 else 's'}\n")
    return EXIT_OK


# --- serve -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeSettings:
    """The resolved settings of ``serve``: flag, then (state only) environment, then file,
    then default."""

    name: str | None
    host: str
    port: int
    db: str | None
    postgres: str | None
    keys: tuple[str, ...]
    submission_prefix: str
    monitoring_prefix: str
    max_body: int
    read_timeout: float
    config_ttl: float
    status_endpoints: bool
    shutdown_timeout: float
    workers: int
    limits: Limits


def _pick(flag: Any, parse: Callable[[Any], Any], from_file: Any, default: Any) -> Any:
    if flag is not None:
        return parse(flag)
    return default if from_file is None else from_file


def serve_settings(args: argparse.Namespace, cfg: FileConfig | None) -> ServeSettings:
    """Resolve ``serve``'s settings from its parsed arguments and the config file."""

    def file(attr: str) -> Any:
        return None if cfg is None else getattr(cfg, attr)

    def name_arg(text: str) -> str:
        check_key_name(utf8_arg(text, "--name"))
        return text

    host, port = _pick(
        args.listen,
        lambda t: parse_listen(utf8_arg(t, "--listen"), "--listen"),
        file("listen"),
        parse_listen(DEFAULT_LISTEN),
    )
    db, pg = _location(args, cfg)
    return ServeSettings(
        name=_pick(args.name, name_arg, file("name"), None),
        host=host,
        port=port,
        db=db,
        postgres=pg,
        keys=tuple(_key_paths(args, cfg)),
        submission_prefix=_pick(
            args.submission_prefix,
            lambda t: check_prefix(utf8_arg(t, "x"), "--submission-prefix"),
            file("submission_prefix"),
            "",
        ),
        monitoring_prefix=_pick(
            args.monitoring_prefix,
            lambda t: check_prefix(utf8_arg(t, "x"), "--monitoring-prefix"),
            file("monitoring_prefix"),
            "",
        ),
        max_body=_pick(
            args.max_body,
            lambda t: parse_max_body(t, "--max-body"),
            file("max_body"),
            DEFAULT_MAX_BODY,
        ),
        read_timeout=_pick(
            args.read_timeout,
            lambda t: parse_seconds(t, "--read-timeout", positive=True),
            file("read_timeout"),
            DEFAULT_READ_TIMEOUT,
        ),
        config_ttl=_pick(
            args.config_ttl,
            lambda t: parse_seconds(t, "--config-ttl", positive=False),
            file("config_ttl"),
            DEFAULT_CONFIG_TTL,
        ),
        status_endpoints=_pick(args.status_endpoints, bool, file("status_endpoints"), True),
        shutdown_timeout=_pick(
            args.shutdown_timeout,
            lambda t: parse_seconds(t, "--shutdown-timeout", positive=False),
            file("shutdown_timeout"),
            DEFAULT_SHUTDOWN_TIMEOUT,
        ),
        workers=_pick(
            args.workers, lambda t: parse_workers(t, "--workers"), file("workers"), DEFAULT_WORKERS
        ),
        limits=Limits(
            **{
                key: _pick(
                    getattr(args, key),
                    functools.partial(_parse_limit, key),
                    file(key),
                    getattr(DEFAULT_LIMITS, key),
                )
                for key in (*LIMIT_SECONDS, *LIMIT_COUNTS)
            }
        ),
    )


def _flag(setting: str) -> str:
    return "--" + setting.replace("_", "-")


def _limit_text(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _parse_limit(key: str, text: str) -> float | int:
    """A connection limit's flag value: seconds (> 0) or a count (>= 1)."""
    if key in LIMIT_SECONDS:
        return parse_seconds(text, _flag(key), positive=True)
    return parse_max_body(text, _flag(key))


def _request_logger() -> logging.Logger:
    """The server's logger, writing each record's message (one JSON line) to stderr."""
    from witness.server import LOGGER_NAME  # noqa: PLC0415 - aiohttp only for serve

    # The logging HOWTO's "Optimization": the records carry no caller, thread or process,
    # which the JSON lines do not show; it saves a frame walk and three calls per request.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logger = logging.getLogger(LOGGER_NAME)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def _cmd_serve(args: argparse.Namespace) -> int:
    from witness.server import make_app  # noqa: PLC0415 - aiohttp only for serve
    from witness.serving import serve  # noqa: PLC0415

    s = serve_settings(args, _config(args))
    name, keys = _witness_keys(s.keys, s.name)
    vkeys = [k.vkey() for k in keys]
    if not s.postgres:
        _existing(s.db)
    logger = _request_logger()

    def factory(worker: int | None) -> tuple[web.Application, Callable[[], None]]:
        state = open_state(db=s.db, postgres=s.postgres, create=False)
        try:
            app = make_app(
                state,
                [_cosigner(k) for k in keys],
                name=name,
                submission_prefix=s.submission_prefix,
                monitoring_prefix=s.monitoring_prefix,
                max_body=s.max_body,
                read_timeout=s.read_timeout,
                config_ttl=s.config_ttl,
                status_endpoints=s.status_endpoints,
                logger=logger,
                worker=worker,
                limits=s.limits,
            )
        except BaseException:
            state.close()
            raise
        return app, state.close

    # The state and the settings are checked here, once, before any worker starts.
    _, close = factory(None)
    close()
    if args.check:
        lines = [
            ("name", name),
            ("listen", format_listen(s.host, s.port)),
            ("db" if s.db is not None else "postgres", s.db or "(set)"),
            *(("key", k) for k in s.keys),
            ("submission_prefix", s.submission_prefix or '""'),
            ("monitoring_prefix", s.monitoring_prefix or '""'),
            ("max_body", str(s.max_body)),
            ("read_timeout", f"{s.read_timeout:g}"),
            ("config_ttl", f"{s.config_ttl:g}"),
            ("status_endpoints", "true" if s.status_endpoints else "false"),
            ("shutdown_timeout", f"{s.shutdown_timeout:g}"),
            ("workers", str(s.workers)),
            *(
                (key, _limit_text(getattr(s.limits, key)))
                for key in (*LIMIT_SECONDS, *LIMIT_COUNTS)
            ),
            *(("vkey", v) for v in vkeys),
        ]
        write_stdout("".join(f"{k} {v}\n" for k, v in lines))
        return EXIT_OK
    return serve(
        factory,
        host=s.host,
        port=s.port,
        workers=s.workers,
        shutdown_timeout=s.shutdown_timeout,
        vkeys=vkeys,
        logger=logger,
    )


# --- the parser ------------------------------------------------------------------------------


_EPILOG_MAIN = f"""\
Run '{PROG} VERB --help' for the details and examples of a verb.

state options (every verb but vkey; --config: every verb but init):
  --config FILE   a witness.toml (env {ENV_CONFIG}); its db/postgres and keys apply to
                  every verb
  --db PATH       a SQLite state file (env {ENV_DB}); default: witness.db in the config
                  file's directory, or in the current directory
  --postgres URL  a PostgreSQL connection string or URL (env {ENV_POSTGRES})

exit status:
  0  success
  1  verification failure: an imported state's note does not verify; corrupt stored data
  2  unusable input or usage: malformed data, bad arguments, unreadable file, a refused
     change (origin already configured, an import moving a log backwards)
  4  backend trouble: the database failed, a COMMIT got no verdict (read back before
     retrying), a log list could not be fetched
Every failure prints one line on standard error: '{PROG}: VERB: message'.

examples:
  {PROG} init --name example.com/w1 --dir /var/lib/witness
  cd /var/lib/witness
  {PROG} add-log example.com/log --key example.com/log+0123abcd+AQ...
  {PROG} pull-logs https://example.org/log-list.1
  {PROG} serve --config /var/lib/witness/witness.toml --listen 0.0.0.0:7380
"""

_EPILOG_INIT = f"""\
Writes into --dir (created when missing, mode 0700; default: the current directory):

  {KEY_FILE}        the Ed25519 cosignature/v1 signer key (type 0x04), Go
                     PRIVATE+KEY+NAME+ID+BASE64 format, mode 0600
  {MLDSA_KEY_FILE}  with --mldsa: the ML-DSA-44 subtree/v1 key (type 0x06), which adds
                     an ML-DSA-44 cosignature to every answer and enables sign-subtree
  {CONFIG_FILE}       every setting of 'serve', commented (mode 0600)

and creates the state (default: {DB_FILE} in --dir; --db, --postgres or the environment
name another; an existing state is kept as it is). It never overwrites a file: if one exists,
nothing is written (exit 2). Prints the witness's vkeys, one per line -- give them to log
operators, with the witness's name and URL. --json prints one object with the paths.

examples:
  {PROG} init --name example.com/w1 --dir /var/lib/witness
  {PROG} init --name example.com/w1 --dir w1 --mldsa --postgres postgresql://w@db/witness
"""

_EPILOG_VKEY = f"""\
Prints the witness's vkeys, one per line, from its key files: --key FILE (repeatable), else
the config file's keys, else {KEY_FILE} (and {MLDSA_KEY_FILE} when it exists) in the
config file's directory or the current directory.

examples:
  {PROG} vkey --config /var/lib/witness/witness.toml
"""

_EPILOG_ADD_LOG = f"""\
Follows a new log: its checkpoints are cosigned when signed by one of its keys (vkeys of type
0x01 Ed25519 or 0x06 ML-DSA-44; repeat --key for several). --qpd caps the add-checkpoint
requests per UTC day (429 beyond). An origin already configured, even disabled, is refused:
logs are never deleted, since re-adding one could let the witness cosign a split view.

examples:
  {PROG} add-log example.com/log --key example.com/log+0123abcd+AQ... --qpd 86400
"""

_EPILOG_ADD_KEY = f"""\
Trusts one more key for a configured log (key rotation); keys are never removed.

examples:
  {PROG} add-key example.com/log example.com/log+4567cdef+AQ...
"""

_EPILOG_DISABLE = f"""\
A disabled log keeps its state; its checkpoints are refused with 404 (the body says it is
disabled). enable-log undoes it. Nothing ever deletes a log.

examples:
  {PROG} disable-log example.com/log
  {PROG} enable-log example.com/log
"""

_EPILOG_LIST = f"""\
One line per log: the origin (JSON-quoted), enabled or disabled, the size of the latest
cosigned checkpoint and when it was cosigned, the qpd, then one '  key VKEY' line per key.
--json prints one object per log per line (JSON Lines): origin, keys, qpd, disabled, size,
root (base64), updated_at (Unix seconds); null when never cosigned.

examples:
  {PROG} list-logs --json | jq -r 'select(.size == null) | .origin'
"""

_EPILOG_PULL = f"""\
Reads a transparency-dev/witness-network logs/v0 list from FILE ('-': standard input) or an
http:// or https:// URL (one GET, --timeout seconds, default {DEFAULT_FETCH_TIMEOUT:g}). The
list is parsed strictly first (exit 2 naming the line). Then, per listed log: a new origin is
added with its key and qpd; an existing one gets the listed key if it lacks it and the listed
qpd; a log whose key type this witness cannot follow (ECDSA, say) is skipped. Nothing is ever
removed, and a disabled log stays disabled. Prints one line per change and a summary;
--dry-run writes nothing. Safe to run from cron: re-running converges.

format:
  # comment                  empty lines and '#' lines are ignored
  logs/v0                    header
  vkey NAME+ID+KEY           one entry per log, lines in this order:
  origin ORIGIN|none         (optional; none: the vkey's name)
  bastion URL|none           (optional)
  qpd N                      requests per day, >= 1
  contact TEXT

examples:
  {PROG} pull-logs https://example.org/lists/log-list.1
  {PROG} pull-logs --dry-run log-list.1
"""

_EPILOG_EVIDENCE = f"""\
Lists the kept evidence of split views -- requests whose checkpoint, signed by the log, proves
a fork against the checkpoint the witness holds (two roots for one size, or a consistency proof
that leads to the request's root from another root at the stored size) -- newest first:
'ID TIME ORIGIN REASON'. --show ID prints that request's raw body byte for byte; with --out DIR
it writes the request, its signed note (submitted.note), its proof (proof.txt) and the
witness's stored note (stored.note) as files, for 'tlog open' and 'tlog check consistency'
(see the operator guide, "Evidence"); --json prints objects (JSON Lines) with the request and
the stored note in base64.

examples:
  {PROG} evidence --origin example.com/log
  {PROG} evidence --show 3 > evidence-3.txt
  {PROG} evidence --show 3 --out evidence-3
"""

_EPILOG_EXPORT = f"""\
Writes every log's configuration and latest cosigned note, from one consistent snapshot, in
the tlog-witness-state v1 format (witness/sqlstate.py) to --out FILE (written under a
temporary name and renamed when complete) or standard output. Evidence is not exported.

examples:
  {PROG} export-state --out witness.state
"""

_EPILOG_IMPORT = f"""\
Merges an export-state FILE ('-': standard input) into the state, creating it when missing, in
one atomic write: new logs are added, keys are added, qpd replaced, a log disabled on either
side stays disabled, and a checkpoint only moves a log forward. If any log of the file is
behind the state (smaller size, or the same size with another root), nothing is written (exit
2, naming every such log). A cosigned note that does not verify with its log's keys: exit 1.
The whole file is checked before the state is opened; a failed import into a new SQLite file
leaves no file behind.

examples:
  {PROG} export-state --db old.db --out witness.state
  {PROG} import-state --db new.db witness.state
"""


def _serve_epilog() -> str:
    flags = {
        "name": "--name NAME",
        "listen": "--listen HOST:PORT",
        "db": "--db PATH",
        "postgres": "--postgres URL",
        "keys": "--key FILE (repeat)",
        "submission_prefix": "--submission-prefix P",
        "monitoring_prefix": "--monitoring-prefix P",
        "max_body": "--max-body BYTES",
        "read_timeout": "--read-timeout S",
        "config_ttl": "--config-ttl S",
        "status_endpoints": "--[no-]status-endpoints",
        "shutdown_timeout": "--shutdown-timeout S",
        "workers": "--workers N",
        **{key: _flag(key) + " S" for key in LIMIT_SECONDS},
        **{key: _flag(key) + " N" for key in LIMIT_COUNTS},
    }
    rows = []
    for s in SETTINGS:
        if len(s.name) > 18:
            rows.append(f"  {s.name} {flags[s.name]}")
            rows.append(f"  {'':<18} {s.kind}, default {s.default}")
        else:
            rows.append(f"  {s.name:<18} {flags[s.name]:<24} {s.kind}, default {s.default}")
        rows.append(f"  {'':<18} {s.help}")
    table = "\n".join(rows)
    return f"""\
Serves the C2SP tlog-witness API: POST <submission_prefix>/add-checkpoint (and
/sign-subtree with an ML-DSA-44 key), GET <monitoring_prefix>/<hex sha256(origin)>/checkpoint,
and, unless disabled, / (HTML status) and /metrics (Prometheus).

settings -- witness.toml key, flag, type and default (a flag overrides the file; relative
paths in the file are relative to its directory; the state also reads {ENV_DB} and
{ENV_POSTGRES}, between the flag and the file):
{table}

At start it prints, on standard output, 'vkey VKEY' per key, then 'listening on URL' per
bound address (port 0 shows the port taken). Each request logs one JSON line on standard
error (endpoint, method, status, duration_ms, origin, old, size, error). SIGTERM or SIGINT
stops accepting connections, lets requests in flight finish for shutdown_timeout seconds and
exits 0. --check resolves every setting, reads the keys, opens the state, prints the settings
('setting value' lines) and exits without listening.

examples:
  {PROG} serve --config /var/lib/witness/witness.toml
  {PROG} serve --config witness.toml --listen 0.0.0.0:7380 --submission-prefix /witness
  {PROG} serve --config witness.toml --check
"""


def _add_parser(
    subparsers: Any,
    name: str,
    help_text: str,
    epilog: str,
    func: Callable[[argparse.Namespace], int],
    *,
    config: bool = True,
    state: bool = True,
) -> argparse.ArgumentParser:
    p = add_verb(subparsers, name, help_text, epilog, func)
    g = p.add_argument_group("state options")
    if config:
        g.add_argument("--config", metavar="FILE", help=f"witness.toml (env {ENV_CONFIG})")
    if state:
        where = g.add_mutually_exclusive_group()
        where.add_argument("--db", metavar="PATH", help=f"SQLite state file (env {ENV_DB})")
        where.add_argument("--postgres", metavar="URL", help=f"PostgreSQL URL (env {ENV_POSTGRES})")
    return p


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tlog-witness`` command."""
    parser, verbs = command_parser(
        PROG, "A C2SP tlog-witness: cosigns checkpoints of the logs it follows.", _EPILOG_MAIN
    )

    p = _add_parser(
        verbs, "init", "create the witness's keys, config and state", _EPILOG_INIT, _cmd_init,
        config=False,
    )  # fmt: skip
    p.add_argument("--name", required=True, metavar="NAME", help="the witness's name")
    p.add_argument("--dir", default=".", metavar="DIR", help="where to write (default: .)")
    p.add_argument("--mldsa", action="store_true", help="also make an ML-DSA-44 key")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = _add_parser(
        verbs, "vkey", "print the witness's vkeys", _EPILOG_VKEY, _cmd_vkey, state=False
    )
    p.add_argument("--key", action="append", metavar="FILE", help="signer key file (repeatable)")

    p = _add_parser(verbs, "add-log", "follow a new log", _EPILOG_ADD_LOG, _cmd_add_log)
    p.add_argument("origin", metavar="ORIGIN", help="the log's checkpoint origin")
    p.add_argument(
        "--key", action="append", required=True, metavar="VKEY", help="log vkey (repeatable)"
    )
    p.add_argument("--qpd", metavar="N", help="requests per day (default: unlimited)")

    p = _add_parser(verbs, "add-key", "trust one more key for a log", _EPILOG_ADD_KEY, _cmd_add_key)
    p.add_argument("origin", metavar="ORIGIN", help="the log's origin")
    p.add_argument("vkey", metavar="VKEY", help="the new key")

    p = _add_parser(
        verbs, "disable-log", "refuse a log's checkpoints", _EPILOG_DISABLE, _cmd_disable_log
    )
    p.add_argument("origin", metavar="ORIGIN", help="the log's origin")
    p = _add_parser(verbs, "enable-log", "re-enable a log", _EPILOG_DISABLE, _cmd_enable_log)
    p.add_argument("origin", metavar="ORIGIN", help="the log's origin")

    p = _add_parser(verbs, "list-logs", "list the logs followed", _EPILOG_LIST, _cmd_list_logs)
    p.add_argument("--json", action="store_true", help="print JSON Lines")

    p = _add_parser(
        verbs, "pull-logs", "add logs from a logs/v0 list", _EPILOG_PULL, _cmd_pull_logs
    )
    p.add_argument("source", metavar="FILE|URL", help="the list: a file, - or an http(s) URL")
    p.add_argument("--dry-run", action="store_true", help="print the changes, write nothing")
    p.add_argument(
        "--timeout",
        default=f"{DEFAULT_FETCH_TIMEOUT:g}",
        metavar="SECONDS",
        help=f"for a URL (default {DEFAULT_FETCH_TIMEOUT:g})",
    )

    p = _add_parser(
        verbs, "evidence", "show kept split-view evidence", _EPILOG_EVIDENCE, _cmd_evidence
    )
    p.add_argument("--origin", metavar="ORIGIN", help="one log's evidence only")
    p.add_argument(
        "--limit", default=str(DEFAULT_EVIDENCE_LIMIT), metavar="N", help="newest N (default 100)"
    )
    p.add_argument("--show", metavar="ID", help="print that evidence's raw request")
    p.add_argument("--json", action="store_true", help="print JSON Lines")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="with --show: write its parts to DIR (request, submitted.note, proof.txt,"
        " stored.note) for a third party to check",
    )

    p = _add_parser(
        verbs, "export-state", "write the state to a file", _EPILOG_EXPORT, _cmd_export_state
    )
    p.add_argument("--out", metavar="FILE", help="output file (default: standard output)")

    p = _add_parser(
        verbs, "import-state", "merge an exported state", _EPILOG_IMPORT, _cmd_import_state
    )
    p.add_argument("file", metavar="FILE", help="an export-state file, or - for stdin")

    p = _add_parser(verbs, "serve", "run the witness server", _serve_epilog(), _cmd_serve)
    p.add_argument("--listen", metavar="HOST:PORT", help=f"default {DEFAULT_LISTEN}")
    p.add_argument("--name", metavar="NAME", help="the witness's name (default: the keys')")
    p.add_argument("--key", action="append", metavar="FILE", help="signer key file (repeatable)")
    p.add_argument("--submission-prefix", metavar="P", help='e.g. /witness (default "")')
    p.add_argument("--monitoring-prefix", metavar="P", help='e.g. /witness (default "")')
    p.add_argument("--max-body", metavar="BYTES", help=f"default {DEFAULT_MAX_BODY}")
    p.add_argument("--read-timeout", metavar="S", help=f"default {DEFAULT_READ_TIMEOUT:g}")
    p.add_argument("--config-ttl", metavar="S", help=f"default {DEFAULT_CONFIG_TTL:g}")
    p.add_argument(
        "--status-endpoints",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve / and /metrics (default: yes)",
    )
    p.add_argument("--shutdown-timeout", metavar="S", help=f"default {DEFAULT_SHUTDOWN_TIMEOUT:g}")
    for key in (*LIMIT_SECONDS, *LIMIT_COUNTS):
        p.add_argument(
            _flag(key),
            metavar="S" if key in LIMIT_SECONDS else "N",
            help=f"default {_limit_text(getattr(DEFAULT_LIMITS, key))}",
        )
    p.add_argument(
        "--workers",
        metavar="N",
        help=f"server processes on the one state; the number of cores uses them all"
        f" (default {DEFAULT_WORKERS})",
    )
    p.add_argument("--check", action="store_true", help="print the settings and exit")
    # Listed here for --help only: main() hands "conformance ..." to witness.conformance,
    # which has its own parser (it needs no state, and tests any witness, not this one).
    verbs.add_parser(
        "conformance",
        help="run the black-box protocol suite against a witness URL",
        add_help=False,
    )
    return parser


_VERBS = (
    "init", "vkey", "add-log", "add-key", "disable-log", "enable-log", "list-logs",
    "pull-logs", "evidence", "export-state", "import-state", "serve",
)  # fmt: skip


_STATUSES = (
    Exit(
        CommitUnknownError,
        EXIT_BACKEND,
        lambda e: f"the write may or may not have landed (read back before retrying): {e}",
    ),
    Exit(CorruptStateError, EXIT_UNVERIFIED),
    Exit((BackendError, StateError, FetchError), EXIT_BACKEND),
    # SIGINT outside serve's event loop (which handles it as a graceful stop).
    Exit(KeyboardInterrupt, EXIT_INTERRUPTED, lambda e: "interrupted"),
)
"""How ``tlog-witness``'s own exceptions map to exit statuses, checked in this order before
the common rules of :mod:`tlog.cli.run`."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tlog-witness`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    The one place where exceptions become exit statuses (:data:`_STATUSES`, then the common
    rules of :func:`tlog.cli.run.run`), each with one line on standard error:
    CorruptStateError and VerificationError → 1; MalformedError, UsageError, OSError,
    UnicodeDecodeError and argparse errors → 2; BackendError, CommitUnknownError, other state
    errors and FetchError → 4; KeyboardInterrupt → 130. ``--help`` exits 0 through
    SystemExit, as argparse does.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["conformance"]:
        from witness.conformance import conformance_main  # noqa: PLC0415 - a separate tool

        return conformance_main(args_list[1:])
    return run(PROG, _VERBS, build_parser, args_list, _STATUSES)


if __name__ == "__main__":
    sys.exit(main())
