"""The ``tlog-store`` command: a journal store, its Merkle log and checkpoints from the shell.

Verbs (every one takes the store options below)::

    tlog-store init --origin ORIGIN [--json]
    tlog-store vkey
    tlog-store acquire RUN --owner O --ttl SECONDS [--json]
    tlog-store renew RUN --owner O --epoch E --ttl SECONDS [--json]
    tlog-store release RUN --epoch E
    tlog-store append RUN --epoch E --kind K [--data JSON] [--case C] [--effect-key K] [--json]
    tlog-store append RUN --epoch E --batch FILE|- [--json]
    tlog-store seal RUN --epoch E --outcome O [--json]
    tlog-store head RUN [--json]
    tlog-store read RUN [--from SEQ] [--json]
    tlog-store verify [RUN ...] [--json]
    tlog-store checkpoint [--unsigned] [--json]
    tlog-store publish [FILE] [--witness-key VKEY]... [--witness-keys FILE]...
    tlog-store publish --witness URL=VKEY [--witness URL=VKEY]... [--policy FILE] [--timeout S]
    tlog-store published [--json]
    tlog-store prove RUN [--out FILE]
    tlog-store export [--out FILE|-] [--witness-key VKEY]... [--witness-keys FILE]...
                      [--record-key VKEY]...
    tlog-store restore FILE [--record-key VKEY]... [--require-record-signatures] [--json]

Each verb is one call of the library — a :class:`~store.api.JournalStore` method or a function
of :mod:`store.batch`, :mod:`store.verify`, :mod:`store.prove`, :mod:`store.publish` or
:mod:`store.export` — with its argument parsing and its printing, declared once as a
:class:`tlog.cli.run.Verb` in :func:`command`.

Store options: ``--db PATH`` (a SQLite file, the embedded default; environment variable
``TLOG_STORE_DB``) or ``--postgres URL`` (a libpq connection string or URL;
``TLOG_STORE_POSTGRES``), exactly one; ``--tenant T`` (default ``default``); ``--key FILE`` (the
log's Ed25519 signer key; ``TLOG_STORE_KEY``, and with SQLite by default ``<db path>.key``).
Every verb accepts ``--key``, so that one set of store options serves them all, but only
``init``, ``checkpoint`` (unless ``--unsigned``), ``prove`` (when it must sign) and ``publish
--witness`` read it. A flag wins over the environment. Verbs other than ``init`` refuse a
SQLite path that does not exist rather than create an empty database there.

Input formats (read as bytes and parsed strictly):

* key file: the Go ``PRIVATE+KEY+<name>+<key ID>+<base64>`` text of a type-0x01 (Ed25519) key
  (:mod:`tlog.keys`); ``init`` creates one (mode 0600, never overwriting) when none exists. The
  key's own name does not matter: each tenant's checkpoints are signed under the name
  ``<origin>/<tenant>``, the tenant log's origin;
* ``--data``: a record's data, strict JSON (:func:`store.batch.parse_data`); the store writes
  the canonical form (:mod:`tlog.journal`);
* batch file (``append --batch``): the JSON Lines batch format of :mod:`store.batch`, appended
  atomically or not at all;
* numbers (``--epoch``, ``--ttl``, ``--from``): canonical decimal, at most 2^63-1;
* note (``publish``): a C2SP signed note, at most 1 MiB.

Outputs go to standard output: see each verb's ``--help``. ``--json`` prints one JSON object
(``read --json`` prints one object per record per line, JSON Lines, so that it streams).

Exit status: 0 success, 1 does not verify, 2 unusable input or usage, 3 refused by the store's
rules, 4 backend trouble, as ``tlog-store --help`` tells its users. Which exception gives which
status is :data:`_STATUSES` (then the common rules of :mod:`tlog.cli.run`), the one mapping.
Every failure prints exactly one line on standard error, ``tlog-store: <verb>: <message>``, and
never a traceback. A closed standard output (``tlog-store ... | head``) ends the command silently
with status 2. Exceptions other than :class:`tlog.errors.TlogError`, :class:`OSError` and
:class:`UnicodeDecodeError` are bugs and are left to surface.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from store.api import Append, JournalStore, Lease, Seal
from store.batch import check_field, parse_batch, parse_data
from store.errors import (
    BackendError,
    CommitUnknownError,
    CorruptError,
    DuplicateEffectError,
    FencedError,
    LeaseHeldError,
    LeaseNotHeldError,
    RunSealedError,
)
from store.open import init_store, open_store
from store.prove import NotSealedError, prove_run
from store.publish import (
    DEFAULT_TIMEOUT,
    KeptCheckpoint,
    publish_to_witnesses,
    published_checkpoints,
    witness_clients,
)
from store.verify import RunCheck, read_pages, verify_runs
from tlog.checkpoint import Checkpoint
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
from tlog.cli.run import Command, Exit, Verb, decimal_arg, utf8_arg, write_stdout
from tlog.encoding import b64encode
from tlog.errors import MalformedError, TlogError, UsageError, VerificationError
from tlog.export import ExportFormatError
from tlog.journal import (
    Record,
    check_case_id,
    check_effect_key,
    check_kind,
    check_outcome,
    check_run_id,
    check_tenant,
)
from tlog.keys import SignerKey, generate_key
from tlog.note import MAX_NOTE_SIZE, TYPE_ED25519, check_key_name, parse_note
from tlog.policy import Policy

__all__ = ["NotSealedError", "build_parser", "command", "main"]

EXIT_OK = clirun.EXIT_OK
EXIT_UNVERIFIED = clirun.EXIT_UNVERIFIED
EXIT_BAD_INPUT = clirun.EXIT_BAD_INPUT
EXIT_REFUSED = 3
EXIT_BACKEND = 4

ENV_DB = "TLOG_STORE_DB"
ENV_POSTGRES = "TLOG_STORE_POSTGRES"
ENV_KEY = "TLOG_STORE_KEY"
DEFAULT_TENANT = "default"

MAX_KEY_FILE_SIZE = clifiles.MAX_KEY_FILE_SIZE

READ_PAGE = 1000
"""Records fetched per query by ``read`` and ``verify``: output streams, memory stays flat."""

DEFAULT_PUBLISH_TIMEOUT = DEFAULT_TIMEOUT
"""Seconds ``publish --witness`` waits for the witnesses, all requests included."""


# --- input -----------------------------------------------------------------------------------


def _text_arg(text: str, what: str) -> str:
    """A non-empty UTF-8 command-line string without control characters."""
    utf8_arg(text, what)
    if not text:
        raise MalformedError(f"{what} is empty")
    if any(c < " " or c == "\x7f" for c in text):
        raise MalformedError(f"{what} contains a control character")
    return text


def _run_arg(text: str) -> str:
    check_run_id(utf8_arg(text, "RUN"))
    return text


def _vkey_args(flags: Sequence[str], files: Sequence[str], what: str) -> list[str]:
    """Vkeys from repeated flags and from files of one vkey per line (each line ending in LF)."""
    vkeys = [utf8_arg(v, f"--{what}-key") for v in flags]
    for path in files:
        source = f"{what} key file {input_name(path)}"
        data = read_input(path, MAX_NOTE_SIZE)
        if data and not data.endswith(b"\n"):
            raise MalformedError(f"{source} does not end in a newline")
        for i, line in enumerate(data[:-1].split(b"\n") if data else [], 1):
            try:
                vkeys.append(line.decode("utf-8"))
            except UnicodeDecodeError:
                raise MalformedError(f"{source} line {i} is not UTF-8") from None
    return vkeys


# --- output ----------------------------------------------------------------------------------


def _write_json(obj: object) -> None:
    write_stdout(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def _jsonable(value: object) -> object:
    """A result value as JSON: bytes become base64, dataclasses objects, tuples lists."""
    if isinstance(value, bytes):
        return b64encode(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


# --- store and key -----------------------------------------------------------------------------


def _backend(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(db, postgres): the flags, else the environment; exactly one must be set."""
    if args.db is not None:
        db: str | None = utf8_arg(args.db, "--db")
        pg: str | None = None
    elif args.postgres is not None:
        db, pg = None, utf8_arg(args.postgres, "--postgres")
    else:
        db = os.environ.get(ENV_DB) or None
        pg = os.environ.get(ENV_POSTGRES) or None
        if db is not None and pg is not None:
            raise UsageError(
                f"both {ENV_DB} and {ENV_POSTGRES} are set: choose with --db or --postgres"
            )
        if db is None and pg is None:
            raise UsageError(
                f"no store given: use --db PATH or --postgres URL (or set {ENV_DB} or "
                f"{ENV_POSTGRES})"
            )
    if db == "" or pg == "":
        raise UsageError("the store path or URL is empty")
    return db, pg


def _tenant(args: argparse.Namespace) -> str:
    tenant: str = utf8_arg(args.tenant, "--tenant")
    check_tenant(tenant)
    return tenant


def _key_path(args: argparse.Namespace, db: str | None) -> str:
    """The log key file: --key, else TLOG_STORE_KEY, else (SQLite only) ``<db>.key``."""
    if args.key is not None:
        return str(utf8_arg(args.key, "--key"))
    env = os.environ.get(ENV_KEY)
    if env:
        return env
    if db is not None:
        return db + ".key"
    raise UsageError(f"with --postgres the log key must be given: --key FILE (or {ENV_KEY})")


def _read_key(path: str) -> SignerKey:
    key = read_key_file(path)
    if key.key_type != TYPE_ED25519:
        raise UsageError(f"key file {path} is not an Ed25519 (type 0x01) log key")
    return key


def _open(args: argparse.Namespace, *, key: bool = False) -> JournalStore:
    """Open the store the arguments name, for their tenant; with the log key when ``key``."""
    db, pg = _backend(args)
    tenant = _tenant(args)
    if db is not None and not os.path.exists(db):
        # Opening it would create an empty database there.
        raise UsageError(f"no store at {db} (create one with 'tlog-store init')")
    signer = _read_key(_key_path(args, db)) if key else None
    return open_store(db=db, postgres=pg, tenant=tenant, key=signer)


# --- init, vkey --------------------------------------------------------------------------------


def _init_key(path: str, origin: str, tenant: str) -> tuple[SignerKey, bool]:
    """The log key in ``path``, made there (mode 0600) when there is none; and whether made."""
    try:
        return _read_key(path), False
    except FileNotFoundError:
        key = generate_key(origin)
        # Fail before writing anything when the tenant log's key name is not valid.
        check_key_name(f"{origin}/{tenant}")
        create_private(path, (key.format() + "\n").encode("utf-8"))
        return key, True


def _cmd_init(args: argparse.Namespace) -> int:
    origin = _text_arg(args.origin, "--origin")
    db, pg = _backend(args)
    tenant = _tenant(args)
    path = _key_path(args, db)
    key, created = _init_key(path, origin, tenant)
    try:
        check_key_name(f"{origin}/{tenant}")
        init_store(db=db, postgres=pg, origin=origin, key=key)
    except TlogError as e:
        # A key made for a store that refused it (initialised with another key or origin)
        # would only be found, and used, by the next command: take it back. Never after an
        # unknown commit (or an interruption): the store may hold this key, the only one.
        if created and not isinstance(e, CommitUnknownError):
            os.unlink(path)
        raise
    with open_store(db=db, postgres=pg, tenant=tenant, key=key) as store:
        vkey = store.log_vkey
        if args.json:
            _write_json({"origin": store.origin, "vkey": vkey, "key": path, "created": created})
        else:
            write_stdout(vkey + "\n")
    return EXIT_OK


def _cmd_vkey(args: argparse.Namespace) -> int:
    with _open(args) as store:
        write_stdout(store.log_vkey + "\n")
    return EXIT_OK


# --- leases --------------------------------------------------------------------------------------


def _write_lease(args: argparse.Namespace, lease: Lease) -> int:
    if args.json:
        _write_json(_jsonable(lease))
    else:
        write_stdout(f"{lease.epoch}\n")
    return EXIT_OK


def _cmd_acquire(args: argparse.Namespace) -> int:
    run = _run_arg(args.run)
    owner = _text_arg(args.owner, "--owner")
    ttl = decimal_arg(args.ttl, "--ttl", 1)
    with _open(args) as store:
        return _write_lease(args, store.acquire(run, owner, ttl))


def _cmd_renew(args: argparse.Namespace) -> int:
    run = _run_arg(args.run)
    owner = _text_arg(args.owner, "--owner")
    epoch = decimal_arg(args.epoch, "--epoch", 1)
    ttl = decimal_arg(args.ttl, "--ttl", 1)
    with _open(args) as store:
        return _write_lease(args, store.renew(run, owner, epoch, ttl))


def _cmd_release(args: argparse.Namespace) -> int:
    run = _run_arg(args.run)
    epoch = decimal_arg(args.epoch, "--epoch", 1)
    with _open(args) as store:
        store.release(run, epoch)
    return EXIT_OK


# --- records -------------------------------------------------------------------------------------


def _record_from_flags(args: argparse.Namespace, run: str) -> Append:
    """The one record that --kind, --data, --case and --effect-key describe."""
    kind = check_field(check_kind, args.kind, "kind", "--kind")
    case = effect_key = None
    if args.case is not None:
        case = check_field(check_case_id, args.case, "case", "--case")
    if args.effect_key is not None:
        effect_key = check_field(check_effect_key, args.effect_key, "effect_key", "--effect-key")
    if args.data is None:
        return Append(run, kind, case=case, effect_key=effect_key)
    data = parse_data(utf8_arg(args.data, "--data"), "--data")
    return Append(run, kind, data, case=case, effect_key=effect_key)


def _batch_from_file(args: argparse.Namespace, run: str) -> list[Append]:
    for flag, value in (("--data", args.data), ("--case", args.case)):
        if value is not None:
            raise UsageError(f"{flag} goes with --kind; batch lines carry their own")
    if args.effect_key is not None:
        raise UsageError("--effect-key goes with --kind; batch lines carry their own")
    return parse_batch(read_input(args.batch), run, f"batch {input_name(args.batch)}")


def _cmd_append(args: argparse.Namespace) -> int:
    run = _run_arg(args.run)
    epoch = decimal_arg(args.epoch, "--epoch", 1)
    if args.batch is not None:
        batch = _batch_from_file(args, run)
    else:
        batch = [_record_from_flags(args, run)]
    with _open(args) as store:
        records = store.append(epoch, batch)
    if args.json:
        _write_json(
            {"run": run, "records": [{"seq": r.seq, "hash": b64encode(r.hash)} for r in records]}
        )
    else:
        write_stdout("".join(f"{r.seq} {b64encode(r.hash)}\n" for r in records))
    return EXIT_OK


def _cmd_seal(args: argparse.Namespace) -> int:
    run = _run_arg(args.run)
    epoch = decimal_arg(args.epoch, "--epoch", 1)
    outcome = utf8_arg(args.outcome, "--outcome")
    try:
        check_outcome(outcome)
    except MalformedError as e:
        raise MalformedError(f"--outcome: {e}") from None
    with _open(args) as store:
        seal: Seal = store.seal(run, epoch, outcome)
    if args.json:
        _write_json(_jsonable(seal))
    else:
        write_stdout(f"position {seal.position}\nhead {b64encode(seal.head)}\n")
    return EXIT_OK


def _cmd_head(args: argparse.Namespace) -> int:
    run = _run_arg(args.run)
    with _open(args) as store:
        head = store.head(run)
    if args.json:
        _write_json({"run": run, "seq": head.seq, "hash": b64encode(head.hash)})
    else:
        write_stdout(f"seq {head.seq}\nhash {b64encode(head.hash)}\n")
    return EXIT_OK


def _record_json(r: Record) -> bytes:
    obj: dict[str, Any] = {
        "seq": r.seq,
        "hash": b64encode(r.hash),
        "prev_hash": b64encode(r.prev_hash),
        "raw": r.raw.decode("utf-8"),
    }
    if r.signature is not None:
        obj["signature"] = {
            "name": r.signature.name,
            "key_id": f"{r.signature.key_id:08x}",
            "sig": b64encode(r.signature.sig),
        }
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


def _cmd_read(args: argparse.Namespace) -> int:
    run = _run_arg(args.run)
    seq = 1 if args.from_seq is None else decimal_arg(args.from_seq, "--from", 1)
    with _open(args) as store:
        # Page by page: what is printed is one checked chain, and a fault stops the listing.
        for page in read_pages(store, run, seq, READ_PAGE):
            if args.json:
                write_stdout(b"".join(_record_json(r) for r in page))
            else:
                write_stdout(
                    b"".join(
                        b"%d %s %s\n" % (r.seq, b64encode(r.hash).encode(), r.raw) for r in page
                    )
                )
    return EXIT_OK


def _check_json(check: RunCheck) -> dict[str, Any]:
    seal = check.seal
    sealed = None if seal is None else {"position": seal.position, "outcome": seal.outcome}
    return {
        "run": check.run,
        "records": check.records,
        "head": b64encode(check.head),
        "sealed": sealed,
    }


def _cmd_verify(args: argparse.Namespace) -> int:
    runs = [_run_arg(r) for r in args.runs]
    results = []
    with _open(args) as store:
        cp = store.checkpoint()
        for check in verify_runs(store, runs, cp, READ_PAGE):
            cp = check.checkpoint
            if args.json:
                results.append(_check_json(check))
                continue
            line = f"ok {check.run} records {check.records} head {b64encode(check.head)}"
            if check.seal is not None:
                line += f" sealed {check.seal.position} {check.seal.outcome}"
            write_stdout(line + "\n")
    if args.json:
        _write_json({"origin": cp.origin, "size": cp.size, "runs": results})
    return EXIT_OK


# --- checkpoints ---------------------------------------------------------------------------------


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    if args.unsigned:
        with _open(args) as store:
            cp = store.checkpoint()
        if args.json:
            _write_json({"origin": cp.origin, "size": cp.size, "root": b64encode(cp.root)})
        else:
            write_stdout(cp.format())
        return EXIT_OK
    with _open(args, key=True) as store:
        note = store.sign_checkpoint()
    if args.json:
        cp = Checkpoint.parse(parse_note(note)[0])
        _write_json(
            {
                "origin": cp.origin,
                "size": cp.size,
                "root": b64encode(cp.root),
                "note": note.decode("utf-8"),
            }
        )
    else:
        write_stdout(note)
    return EXIT_OK


def _cmd_publish(args: argparse.Namespace) -> int:
    if args.witness:
        if args.file is not None:
            raise UsageError("give FILE (a cosigned copy) or --witness, not both")
        return _publish_to_witnesses(args)
    for flag, value in (("--policy", args.policy), ("--timeout", args.timeout)):
        if value is not None:
            raise UsageError(f"{flag} goes with --witness")
    files = args.witness_keys
    if sum(is_stdin(f) for f in [args.file, *files]) > 1:
        raise UsageError("only one input can be standard input ('-')")
    witness_keys = _vkey_args(args.witness_key, files, "witness")
    note = read_input(args.file, MAX_NOTE_SIZE)
    parse_note(note)  # refuse a malformed note here, with the note's own message
    with _open(args) as store:
        write_stdout(store.add_cosignatures(note, witness_keys=witness_keys))
    return EXIT_OK


def _witness_spec(text: str) -> tuple[str, str]:
    """``URL=VKEY`` split at the first ``=`` (a vkey's base64 may end in ``=``, a witness
    URL holds none)."""
    url, sep, vkey = utf8_arg(text, "--witness").partition("=")
    if not sep or not url or not vkey:
        raise UsageError(f"--witness {text!r} is not URL=VKEY")
    return url, vkey


def _policy_arg(path: str | None) -> Policy | None:
    if path is None:
        return None
    try:
        return Policy.parse(read_input(path, MAX_NOTE_SIZE))
    except MalformedError as e:
        raise MalformedError(f"policy {input_name(path)}: {e}") from None


def _publish_to_witnesses(args: argparse.Namespace) -> int:
    """``publish --witness``: :func:`store.publish.publish_to_witnesses`, then its report."""
    specs = [_witness_spec(w) for w in args.witness]
    if args.witness_key or args.witness_keys:
        raise UsageError("--witness-key and --witness-keys go with FILE (--witness names its keys)")
    timeout = (
        DEFAULT_PUBLISH_TIMEOUT
        if args.timeout is None
        else decimal_arg(args.timeout, "--timeout", 1)
    )
    policy = _policy_arg(args.policy)
    clients = witness_clients(specs, timeout=timeout, what="--witness")
    try:
        with _open(args, key=True) as store:
            done = publish_to_witnesses(store, clients, policy=policy, timeout=timeout)
    finally:
        for c in clients:
            c.close()
    write_stdout("".join(f"witness {o.summary()}\n" for o in done.outcomes))
    write_stdout(done.note)
    done.check()
    return EXIT_OK


def _kept_json(kept: KeptCheckpoint) -> dict[str, Any]:
    return {
        "size": kept.size,
        "root": b64encode(kept.root),
        "signers": [{"name": name, "key_id": f"{key_id:08x}"} for name, key_id in kept.signers],
        "note": kept.note.decode("utf-8"),
    }


def _cmd_published(args: argparse.Namespace) -> int:
    with _open(args) as store:
        kept = published_checkpoints(store)
    if args.json:
        _write_json({"checkpoints": [_kept_json(k) for k in kept]})
    else:
        write_stdout(
            "".join(
                f"{k.size} {b64encode(k.root)} "
                + " ".join(f"{name}+{key_id:08x}" for name, key_id in k.signers)
                + "\n"
                for k in kept
            )
        )
    return EXIT_OK


def _sign_now(args: argparse.Namespace) -> bytes:
    # Only now is the log key needed: a second handle that can sign.
    with _open(args, key=True) as signing:
        return signing.sign_checkpoint()


def _cmd_prove(args: argparse.Namespace) -> int:
    run = _run_arg(args.run)
    with _open(args) as store:
        data = prove_run(store, run, sign=lambda: _sign_now(args)).format()
    if is_stdin(args.out):
        write_stdout(data)
    else:
        with output_file(args.out, ".tlog-store-") as f:
            f.write(data)
    return EXIT_OK


# --- export, restore -----------------------------------------------------------------------------


def _cmd_export(args: argparse.Namespace) -> int:
    from store.export import export_store  # noqa: PLC0415

    files = args.witness_keys
    if sum(f == "-" for f in files) > 1:
        raise UsageError("only one input can be standard input ('-')")
    witness_keys = _vkey_args(args.witness_key, files, "witness")
    record_keys = _vkey_args(args.record_key, [], "record")
    with _open(args) as store:
        if is_stdin(args.out):
            export_store(
                store, sys.stdout.buffer, witness_keys=witness_keys, record_keys=record_keys
            )
            sys.stdout.buffer.flush()
        else:
            with output_file(args.out, ".tlog-store-") as f:
                export_store(store, f, witness_keys=witness_keys, record_keys=record_keys)
    return EXIT_OK


def _cmd_restore(args: argparse.Namespace) -> int:
    from store.export import restore_store  # noqa: PLC0415

    path = utf8_arg(args.file, "FILE")
    record_keys = _vkey_args(args.record_key, [], "record") if args.record_key else None
    with open(path, "rb"):
        pass  # an unreadable file is reported as such, before the store is opened
    with _open(args) as store:
        summary = restore_store(
            store,
            path,
            record_keys=record_keys,
            require_record_signatures=args.require_record_signatures,
        )
    result = _jsonable(summary)
    if args.json:
        _write_json(result)
    elif isinstance(result, dict):
        write_stdout("".join(f"{k} {v}\n" for k, v in result.items()))
    else:
        write_stdout(f"{result}\n")
    return EXIT_OK


# --- help texts ----------------------------------------------------------------------------------


_EPILOG_MAIN = """\
Run 'tlog-store VERB --help' for the formats and examples of a verb.

store options (every verb):
  --db PATH       a SQLite file, the embedded default (env TLOG_STORE_DB)
  --postgres URL  a PostgreSQL connection string or URL (env TLOG_STORE_POSTGRES)
  --tenant T      the tenant: 1-64 of [a-z0-9._-] (default: default); its log's origin is
                  <origin>/<tenant>
  --key FILE      the log's Ed25519 signer key, read by the verbs that sign: init,
                  checkpoint, prove, publish --witness (env TLOG_STORE_KEY; with SQLite
                  the default is <db path>.key; required with --postgres); the others
                  accept and ignore it

exit status:
  0  success
  1  verification failure: stored data, an export being restored, a proof or a
     cosignature being published does not verify, or 'prove' of a run that is not sealed
  2  unusable input or usage: malformed data, bad arguments, unreadable file
  3  refused by the store's rules: fenced epoch, lease held or not held, effect already
     started, run sealed
  4  backend trouble: the database failed (nothing written), or the connection failed
     during commit (the write may or may not have been written: read back before retrying)
Every failure prints one line on standard error: 'tlog-store: VERB: message'.

examples:
  export TLOG_STORE_DB=journal.db
  tlog-store init --origin example.com/journal > log.vkey
  EPOCH=$(tlog-store acquire run-1 --owner worker-a --ttl 60)
  tlog-store append run-1 --epoch "$EPOCH" --kind Started --data '{"input": 42}'
  tlog-store seal run-1 --epoch "$EPOCH" --outcome ok
  tlog-store checkpoint > checkpoint
  tlog-store prove run-1 --out run-1.tlog-proof
  tlog-store export --out journal.export
"""

_EPILOG_INIT = """\
Creates the store's schema (idempotent for the same origin and key) and records the base
ORIGIN and the log key's public half. The key file (--key, default <db path>.key with SQLite)
is created with mode 0600 when it does not exist -- a new Ed25519 (type 0x01) key -- and is
loaded, never overwritten, when it does. Prints the tenant log's vkey: the log key under the
name <ORIGIN>/<tenant>, the origin its checkpoints carry. Keep it: auditors verify checkpoints
and proofs with it. --json prints origin, vkey, key (the file) and created (true when this run
made the key).

examples:
  tlog-store init --db journal.db --origin example.com/journal > log.vkey
  tlog-store init --postgres postgresql://app@db/journal --key /etc/tlog/log.key \\
      --origin example.com/journal --tenant acme
"""

_EPILOG_VKEY = """\
Prints the tenant log's vkey again, as the store recorded it at init: the public half of the
log key under the name <origin>/<tenant>. No key file is read.

examples:
  tlog-store vkey --db journal.db --tenant acme
"""

_EPILOG_ACQUIRE = """\
Claims RUN for TTL whole seconds (>= 1) and prints the new epoch, the fencing token every
append and seal must carry. A live lease is refused (exit 3), even to its own owner; a claim
always bumps the epoch, which fences out the previous holder. --json prints the lease (run,
owner, epoch, expires_at).

examples:
  EPOCH=$(tlog-store acquire run-1 --owner worker-a --ttl 60)
"""

_EPILOG_RENEW = """\
Extends the exact live lease (OWNER, EPOCH) by TTL seconds from now, keeping its epoch, and
prints the epoch (--json: the lease). A released, lapsed or taken-over lease is refused (exit 3):
the caller has lost the run.

examples:
  tlog-store renew run-1 --owner worker-a --epoch "$EPOCH" --ttl 60
"""

_EPILOG_RELEASE = """\
Marks the lease at EPOCH expired, keeping its epoch so that the next claim fences it. Idempotent
and never refused; prints nothing.

examples:
  tlog-store release run-1 --epoch "$EPOCH"
"""

_EPILOG_APPEND = """\
Appends records to RUN under EPOCH (which must equal the run's lease epoch, else exit 3).
One record from the flags: --kind K (a letter, then [A-Za-z0-9_.-]), --data JSON (any JSON
value but null -- leave --data out for a record without data --: no floats, no repeated keys,
integers within +-(2^53-1), at most 64 levels deep), --case C, --effect-key K. Or a
batch with --batch FILE (- is standard input): JSON Lines, one object per line, each line ending
in a newline, with the keys kind, and optionally data, case, effect_key -- any other key is
refused with its line number. A batch is written atomically: all of it or nothing.

Three kinds mean something to the store: EffectStarted with an effect key is accepted once per
(run, effect key) -- a second one is refused (exit 3); RunConcluded with data.outcome feeds the
outcome index; RunSealed is reserved for the seal record that 'seal' writes (refused here, exit
2).

Prints one line per record: 'SEQ HASH' (the record's chain hash, base64). --json prints
{"run": ..., "records": [{"seq": ..., "hash": ...}]}.

examples:
  tlog-store append run-1 --epoch 1 --kind Started --data '{"input": 42}' --case case-7
  tlog-store append run-1 --epoch 1 --kind EffectStarted --effect-key email:1
  printf '%s\\n' '{"kind": "Step", "data": 1}' '{"kind": "Step", "data": 2}' |
      tlog-store append run-1 --epoch 1 --batch -
"""

_EPILOG_SEAL = """\
Appends RUN's seal record (kind RunSealed, data {"outcome": OUTCOME}, under EPOCH, signed like
any record when the store signs records), freezes RUN, and enters its head -- the seal
record's hash, which covers the outcome -- into the tenant's Merkle log as the leaf
SHA-256(0x00 || head), at the next log position. The first seal wins: sealing again changes
nothing and prints the same head. Later appends are refused (exit 3), and no append may use the
kind RunSealed (exit 2). OUTCOME is a letter, then up to 63 of [A-Za-z0-9_.-] (as a record
kind). Prints 'position N' and 'head HASH' (--json: run, position, head, outcome).

examples:
  tlog-store seal run-1 --epoch "$EPOCH" --outcome ok
"""

_EPILOG_HEAD = """\
Prints RUN's last record: 'seq N' and 'hash HASH' (seq 0 and 32 zero bytes for a run with no
records). --json prints run, seq and hash.

examples:
  tlog-store head run-1
"""

_EPILOG_READ = """\
Prints RUN's records from --from SEQ (default 1), each hash-checked and link-checked as it is
read: one line per record, 'SEQ HASH BODY', BODY being the record's canonical JSON bytes exactly
as hashed (they hold no newline). --json prints one JSON object per line instead (JSON Lines):
seq, hash, prev_hash, raw (the body as a string) and signature when the record is signed. A
record whose hash does not cover its body, or that does not link to the one before it (from
--from on: the first record's link is taken on trust), stops the listing with exit 1; the
records before it are already printed. Nothing is printed for a run with no records.

examples:
  tlog-store read run-1
  tlog-store read run-1 --from 100 --json | jq -r .raw
"""

_EPILOG_VERIFY = """\
Checks each RUN (default: every run of the tenant): contiguous seqs, links and hashes of its
whole chain; that the stored head is the chain's last hash; and for a sealed run, that the seal
holds that head, that the last record is the seal record naming the seal's outcome, and that
the head is the leaf at the seal's position in the log's current tree
(an inclusion proof checked against the current root). Prints one line per run --
'ok RUN records N head HASH [sealed POSITION OUTCOME]' -- or with --json one object. Exit 1 at
the first run that does not verify; exit 2 for a named run with no records.

examples:
  tlog-store verify
  tlog-store verify run-1 run-2 --json
"""

_EPILOG_CHECKPOINT = """\
Signs the tenant log's current checkpoint (origin, size, root) with the log key, keeps it among
the published checkpoints, and prints the signed note. --unsigned prints the checkpoint text
only, without the key and without keeping anything. --json prints origin, size, root (and note).

examples:
  tlog-store checkpoint > checkpoint
  tlog-store checkpoint --unsigned
"""

_EPILOG_PUBLISH = """\
Two ways to get the kept checkpoints cosigned (so exports and proofs carry the cosignatures):

With FILE (standard input if absent or -): a cosigned copy of a checkpoint this store signed.
Its signature lines are merged into the kept checkpoint, and the merged note is printed. Every
cosignature to keep must be from a witness declared with --witness-key VKEY (or --witness-keys
FILE, one vkey per line; type 0x04 or 0x06, a 0x01 vkey read as 0x04) and must verify: a line
that does not verify is refused (exit 1), a line of an undeclared key or a plain Ed25519 (0x01)
signature -- which no export could carry -- is refused (exit 2); nothing is kept then. Lines
already kept need no key.

With --witness URL=VKEY (repeatable): signs the current checkpoint with the log key (as
'checkpoint' does) and submits it to every witness in parallel over C2SP tlog-witness
(URL is the witness's submission prefix, without '='; VKEY its cosignature key, type 0x04 or
0x06, or 0x01 read as 0x04). Each witness gets 'old 0' first and, on 409, the consistency proof
from the size it holds. Verified cosignatures are merged into the kept checkpoint. Prints one
line per witness -- 'witness URL STATUS: details', STATUS being cosigned, alarm, conflict,
rejected, busy, unavailable, bad-response, error or timeout -- then the kept note.
--policy FILE is a C2SP tlog-policy whose quorum must be met by the kept note (if it lists
logs, this log's vkey must be one); without it every witness must cosign. The quorum is judged
on the kept note, which also holds the cosignatures of earlier publishes of the same checkpoint:
a witness unavailable now still counts if it cosigned this checkpoint before. --timeout S (whole
seconds, default 10) bounds the whole exchange. Exit 1 -- after printing, with the note and
whatever cosignatures came kept -- when the quorum is not met or a witness raised an alarm: a
witness holding a larger tree than this log (a split view or a local rollback), or a 422 (a
proof bug or a fork).

examples:
  tlog-store checkpoint > checkpoint
  tlog sign --key witness.key checkpoint > cosigned     # a cosignature/v1 key
  tlog-store publish cosigned --witness-key "$(tlog vkey witness.key)"
  tlog-store publish --witness https://w1.example/=w1.example+1234abcd+BASE64... \\
      --witness https://w2.example/=w2.example+5678abcd+BASE64... --policy log.policy
"""

_EPILOG_PUBLISHED = """\
Lists the kept checkpoints by increasing size, one per line: 'SIZE ROOT SIGNER...', each signer
as NAME+KEYID (the log key, then any cosigners). --json adds each whole note.

examples:
  tlog-store published
"""

_EPILOG_PROVE = """\
Writes a C2SP tlog-proof@v1 file for a sealed RUN to --out FILE (default: standard output):

  index   the run's position in the tenant's log;
  extra   the run's head, 32 bytes (base64): the hash of its last record;
  hashes  the RFC 6962 inclusion proof of that position in the checkpoint's tree;
  checkpoint  the newest kept checkpoint that covers the position (with every cosignature it
          has gathered), or, when none does, a checkpoint signed now (needs the log key).

The proof is self-contained: the leaf is SHA-256(0x00 || head), with head taken from the extra
line, and the inclusion proof authenticates that head under the log's signed checkpoint. An
auditor verifies it with the tenant log's vkey (tlog.proof.verify_proof with the leaf
tlog.merkle.leaf_hash(extra)); whoever holds the run's records recomputes their chain hash and
compares it with extra. The proof is checked against its checkpoint before it is written.
Exit 1 when RUN is not sealed, or its records no longer give the sealed head.

examples:
  tlog-store prove run-1 --out run-1.tlog-proof
"""

_EPILOG_EXPORT = """\
Streams the tenant's whole journal -- the log key, the kept checkpoints with their
cosignatures, every sealed run by log position and every unsealed run, each with its records
exactly as stored -- in the tlog-toolkit export format (docs/export-format.md) to --out FILE
(default: standard output). A file is written under a temporary name and renamed when
complete; a failed export leaves no file (on standard output, whatever was written before the
failure is a partial export: discard it).

The export declares the keys its signatures need: every witness whose cosignature a kept
checkpoint carries (--witness-key VKEY, or --witness-keys FILE with one vkey per line; a type
0x01 vkey is read as its cosignature/v1 form) and every key that signed records
(--record-key). An undeclared signer is refused (exit 2), naming the key.

examples:
  tlog-store export --out journal.export
  tlog-store export --witness-keys witnesses.vkeys | gzip > journal.export.gz
"""

_EPILOG_RESTORE = """\
Replays an export FILE into this tenant of an initialised, EMPTY store (no runs, no log, no
kept checkpoints; else exit 2). Pass 1 verifies the whole file against the store's own log key
-- every hash, link, signature, position and checkpoint root -- and writes nothing when it does
not verify (exit 1, naming the line). Pass 2 appends the records and seals the runs through the
store's own rules, keeps every exported checkpoint as it is, and checks that the store rebuilt
exactly the export; a failure there (exit 1, naming the line, run and record) leaves the target
partially written: discard it. Initialise the target with the same origin and log key as the
source; exporting the restored store gives the same file byte for byte.

--record-key narrows the trusted record keys (default: those the export declares);
--require-record-signatures refuses unsigned records. Prints the summary, one 'name value'
line each: origin, checkpoints, runs, sealed_runs, records, signed_records, log_size,
log_root, digest (--json: one object).

examples:
  tlog-store init --db copy.db --key journal.db.key --origin example.com/journal
  tlog-store restore --db copy.db journal.export
"""


# --- the verbs -----------------------------------------------------------------------------------


def _store_options(p: argparse.ArgumentParser, options: frozenset[str]) -> None:
    """The store options every verb takes, and ``--json`` for the verbs with ``"json"``.

    Added before the verb's own arguments, so that usage lines and help list them first.
    """
    g = p.add_argument_group("store options")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--db", metavar="PATH", help=f"SQLite store file (env {ENV_DB})")
    where.add_argument("--postgres", metavar="URL", help=f"PostgreSQL URL (env {ENV_POSTGRES})")
    g.add_argument(
        "--tenant", default=DEFAULT_TENANT, metavar="T", help="tenant (default: default)"
    )
    # Every verb takes --key, so that one set of store options serves them all; only the
    # verbs with the option "key" read it.
    g.add_argument(
        "--key",
        metavar="FILE",
        help=(
            f"log signer key (env {ENV_KEY}; default with SQLite: <db path>.key)"
            if "key" in options
            else "log signer key (not read by this verb)"
        ),
    )
    if "json" in options:
        p.add_argument("--json", action="store_true", help="print JSON")


def _verb(
    name: str,
    help_text: str,
    epilog: str,
    handler: Callable[[argparse.Namespace], int],
    arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    options: frozenset[str] = frozenset({"json"}),
) -> Verb:
    """A verb of ``tlog-store``: its own ``arguments`` after the store options."""

    def add(p: argparse.ArgumentParser) -> None:
        _store_options(p, options)
        if arguments is not None:
            arguments(p)

    return Verb(name, help_text, epilog, handler, add, options=options)


_KEY = frozenset({"key", "json"})
_PLAIN = frozenset[str]()
_KEY_PLAIN = frozenset({"key"})


def _run_positional(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run ID")


def _init_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--origin", required=True, metavar="ORIGIN", help="base origin of the logs")


def _acquire_args(p: argparse.ArgumentParser) -> None:
    _run_positional(p)
    p.add_argument("--owner", required=True, metavar="O", help="who claims the run")
    p.add_argument("--ttl", required=True, metavar="SECONDS", help="lease length in seconds")


def _renew_args(p: argparse.ArgumentParser) -> None:
    _run_positional(p)
    p.add_argument("--owner", required=True, metavar="O", help="the lease's owner")
    p.add_argument("--epoch", required=True, metavar="E", help="the lease's epoch")
    p.add_argument("--ttl", required=True, metavar="SECONDS", help="new lease length")


def _release_args(p: argparse.ArgumentParser) -> None:
    _run_positional(p)
    p.add_argument("--epoch", required=True, metavar="E", help="the lease's epoch")


def _append_args(p: argparse.ArgumentParser) -> None:
    _run_positional(p)
    p.add_argument("--epoch", required=True, metavar="E", help="the caller's lease epoch")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--kind", metavar="K", help="the record's kind (one record)")
    what.add_argument("--batch", metavar="FILE", help="JSON Lines batch file, or - for stdin")
    p.add_argument("--data", metavar="JSON", help="the record's data (JSON)")
    p.add_argument("--case", metavar="C", help="the record's case ID")
    p.add_argument("--effect-key", metavar="K", help="the record's effect key")


def _seal_args(p: argparse.ArgumentParser) -> None:
    _run_positional(p)
    p.add_argument("--epoch", required=True, metavar="E", help="the caller's lease epoch")
    p.add_argument("--outcome", required=True, metavar="O", help="the run's outcome")


def _read_args(p: argparse.ArgumentParser) -> None:
    _run_positional(p)
    p.add_argument("--from", dest="from_seq", metavar="SEQ", help="first seq (default 1)")


def _verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="*", metavar="RUN", help="run IDs (default: every run)")


def _checkpoint_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--unsigned", action="store_true", help="print the text only; no key needed")


def _repeated(p: argparse.ArgumentParser, flag: str, metavar: str, help_text: str) -> None:
    p.add_argument(flag, action="append", default=[], metavar=metavar, help=help_text)


def _publish_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", metavar="FILE", help="cosigned note (default: stdin)")
    _repeated(
        p,
        "--witness-key",
        "VKEY",
        "with FILE: a witness whose cosignature may be kept (repeatable)",
    )
    _repeated(p, "--witness-keys", "FILE", "with FILE: witness vkeys, one per line (repeatable)")
    _repeated(
        p, "--witness", "URL=VKEY", "a witness to submit the current checkpoint to (repeatable)"
    )
    p.add_argument("--policy", metavar="FILE", help="tlog-policy whose quorum must be met")
    p.add_argument(
        "--timeout",
        metavar="S",
        help=f"seconds for the whole exchange (default {DEFAULT_PUBLISH_TIMEOUT})",
    )


def _prove_args(p: argparse.ArgumentParser) -> None:
    _run_positional(p)
    p.add_argument("--out", metavar="FILE", help="proof file (default: stdout)")


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="FILE", help="export file, or - for stdout (default)")
    _repeated(
        p,
        "--witness-key",
        "VKEY",
        "a witness whose cosignatures the kept checkpoints carry (repeatable)",
    )
    _repeated(p, "--witness-keys", "FILE", "witness vkeys, one per line (repeatable)")
    _repeated(p, "--record-key", "VKEY", "an Ed25519 key that signed records (repeatable)")


def _restore_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="export file")
    _repeated(p, "--record-key", "VKEY", "a trusted record key (repeatable; default: the export's)")
    p.add_argument(
        "--require-record-signatures",
        action="store_true",
        help="refuse an export holding an unsigned record",
    )


_STATUSES = (
    # Not a failure to retry blindly: the commit's fate is unknown.
    Exit(
        CommitUnknownError,
        EXIT_BACKEND,
        lambda e: f"the write may or may not have been written (read back before retrying): {e}",
    ),
    Exit(BackendError, EXIT_BACKEND),
    # An export that does not follow its format does not verify (as tlog-verify says).
    Exit((CorruptError, VerificationError, ExportFormatError), EXIT_UNVERIFIED),
    Exit(
        (FencedError, LeaseHeldError, LeaseNotHeldError, DuplicateEffectError, RunSealedError),
        EXIT_REFUSED,
    ),
)
"""How ``tlog-store``'s own exceptions map to exit statuses, checked in this order before the
common rules of :mod:`tlog.cli.run` (which give 1 to any other VerificationError — among them
RestoreError and NotSealedError — and 2 to MalformedError, UsageError, OSError, UnicodeDecodeError
and argparse errors). The one statement of the mapping; ``tlog-store --help`` tells users."""


def command() -> Command:
    """The ``tlog-store`` command, each verb declared once with :func:`_verb`.

    Built on each call, so that the handlers are looked up when the command runs.
    """
    return Command(
        prog="tlog-store",
        description="A journal store: hash-chained runs, their Merkle log, checkpoints, proofs.",
        epilog=_EPILOG_MAIN,
        statuses=_STATUSES,
        verbs=(
            _verb("init", "initialise a store", _EPILOG_INIT, _cmd_init, _init_args, _KEY),
            _verb("vkey", "print the tenant log's vkey", _EPILOG_VKEY, _cmd_vkey, None, _PLAIN),
            _verb("acquire", "claim a run's lease", _EPILOG_ACQUIRE, _cmd_acquire, _acquire_args),
            _verb("renew", "extend a lease", _EPILOG_RENEW, _cmd_renew, _renew_args),
            _verb(
                "release", "release a lease", _EPILOG_RELEASE, _cmd_release, _release_args, _PLAIN
            ),
            _verb("append", "append records to a run", _EPILOG_APPEND, _cmd_append, _append_args),
            _verb("seal", "seal a run into the log", _EPILOG_SEAL, _cmd_seal, _seal_args),
            _verb("head", "a run's last seq and hash", _EPILOG_HEAD, _cmd_head, _run_positional),
            _verb("read", "print a run's records", _EPILOG_READ, _cmd_read, _read_args),
            _verb(
                "verify", "check runs' chains and seals", _EPILOG_VERIFY, _cmd_verify, _verify_args
            ),
            _verb(
                "checkpoint",
                "sign and keep the current checkpoint",
                _EPILOG_CHECKPOINT,
                _cmd_checkpoint,
                _checkpoint_args,
                _KEY,
            ),
            _verb(
                "publish",
                "keep a cosigned checkpoint, or get one from witnesses",
                _EPILOG_PUBLISH,
                _cmd_publish,
                _publish_args,
                _KEY_PLAIN,
            ),
            _verb("published", "list kept checkpoints", _EPILOG_PUBLISHED, _cmd_published),
            _verb(
                "prove",
                "write a tlog-proof for a sealed run",
                _EPILOG_PROVE,
                _cmd_prove,
                _prove_args,
                _KEY_PLAIN,
            ),
            _verb(
                "export",
                "write the tenant's export",
                _EPILOG_EXPORT,
                _cmd_export,
                _export_args,
                _PLAIN,
            ),
            _verb(
                "restore",
                "replay an export into an empty store",
                _EPILOG_RESTORE,
                _cmd_restore,
                _restore_args,
            ),
        ),
    )


_VERBS = command().verb_names


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tlog-store`` command."""
    return command().parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tlog-store`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    This is the one place where exceptions become exit statuses (:data:`_STATUSES`), each with
    one line on standard error. ``--help`` exits 0 through SystemExit, as argparse does.
    """
    return command().main(argv)


if __name__ == "__main__":
    sys.exit(main())
