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
    tlog-store admitted KEY [--json]
    tlog-store forget-admissions --older-than UNIX_SECONDS [--json]
    tlog-store waiting [--limit N] [--json]
    tlog-store read RUN [--from SEQ] [--json]
    tlog-store verify [RUN ...] [--json]
    tlog-store checkpoint [--unsigned] [--json]
    tlog-store publish [FILE] [--witness-key VKEY]... [--witness-keys FILE]...
    tlog-store publish --witness URL=VKEY [--witness URL=VKEY]... [--policy FILE] [--timeout S]
    tlog-store published [--json]
    tlog-store prove RUN [--out FILE]
    tlog-store export [--out FILE|-] [--witness-key VKEY]... [--witness-keys FILE]...
                      [--record-key VKEY]...
    tlog-store restore FILE [--key FILE] [--record-key VKEY]... [--require-record-signatures]
                       [--json]
    tlog-store subscribe URL [--run RUN] [--token-file F] [--json]
    tlog-store subscriptions [--json]
    tlog-store unsubscribe ID
    tlog-store deliver [--once] [--batch N] [--timeout S] [--poll S]
    tlog-store serve [--listen HOST:PORT]
    tlog-store tiles --out DIR [--json]
    tlog-store event VERB ...      the inbound-event inbox (:mod:`store.cli_inbox`)

Each verb is one call of the library — a :class:`~store.api.JournalStore` method or a function
of :mod:`store.batch`, :mod:`store.verify`, :mod:`store.prove`, :mod:`store.publish` or
:mod:`store.export`, all exported by :mod:`store` — with its argument parsing and its printing,
declared once as a :class:`tlog.cli.run.Verb` in :func:`command`. What the user writes and
reads — the arguments, how their values are read, the help texts — is :mod:`store.cliparser`
(imported here as ``ui``); this module runs the verbs.

Store options: ``--db PATH`` (a SQLite file, the embedded default; environment variable
``TLOG_STORE_DB``) or ``--postgres URL`` (a libpq connection string or URL;
``TLOG_STORE_POSTGRES``), exactly one; ``--tenant T`` (default ``default``); ``--key FILE`` (the
log's Ed25519 signer key; ``TLOG_STORE_KEY``, and with SQLite by default ``<db path>.key``).
Every verb accepts ``--key``, so that one set of store options serves them all, but only
``init``, ``checkpoint`` (unless ``--unsigned``), ``prove`` (when it must sign) and ``publish
--witness`` read it. They go before the verb or after it (both: the later wins). A flag wins
over the environment. Verbs other than ``init`` refuse a SQLite path that does not exist rather
than create an empty database there.

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

Exit status: 0 success, 1 does not verify, 2 unusable input or usage (also a verb that needs an
extra that is not installed: ``publish --witness`` and ``deliver`` the ``store`` extra,
``--postgres`` the ``postgres`` extra, :mod:`tlog.extras`), 3 refused by the store's rules,
4 backend trouble, as ``tlog-store --help`` tells its users. Which exception gives which
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
from collections.abc import Sequence
from typing import Any

from store import (
    Append,
    BackendError,
    CommitUnknownError,
    CorruptError,
    DuplicateAdmissionError,
    DuplicateEffectError,
    FencedError,
    JournalStore,
    KeptCheckpoint,
    Lease,
    LeaseHeldError,
    LeaseNotHeldError,
    NotSealedError,
    RunCheck,
    RunSealedError,
    Seal,
    export_store,
    init_store,
    open_store,
    parse_batch,
    parse_data,
    prove_run,
    publish_to_witnesses,
    published_checkpoints,
    read_pages,
    restore_store,
    verify_runs,
    witness_clients,
)
from store import cliparser as ui
from store.batch import check_field
from store.cli_inbox import INBOX_PUBLISH, event_verb
from store.cli_outbox import outbox_verbs
from store.cli_tiles import tiles_verbs
from store.cliparser import verb
from store.deliver import (
    record_object,
)
from store.publish import PublishedLog
from tlog.checkpoint import Checkpoint
from tlog.cli import run as clirun
from tlog.cli.files import (
    create_private,
    input_name,
    is_stdin,
    output_file,
    read_input,
)
from tlog.cli.run import Command, Exit, decimal_arg, utf8_arg, write_stdout
from tlog.encoding import b64encode
from tlog.errors import MalformedError, TlogError, UsageError, VerificationError
from tlog.export import ExportFormatError, HeaderItem, read_export
from tlog.journal import (
    Record,
    check_case_id,
    check_effect_key,
    check_kind,
    check_outcome,
)
from tlog.keys import SignerKey, generate_key
from tlog.note import MAX_NOTE_SIZE, check_key_name, parse_note

__all__ = ["NotSealedError", "build_parser", "command", "main"]

EXIT_OK = clirun.EXIT_OK
EXIT_UNVERIFIED = clirun.EXIT_UNVERIFIED
EXIT_BAD_INPUT = clirun.EXIT_BAD_INPUT
EXIT_REFUSED = 3
EXIT_BACKEND = 4


READ_PAGE = 1000
"""Records fetched per query by ``read`` and ``verify``: output streams, memory stays flat."""


# --- output ----------------------------------------------------------------------------------


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


_open = ui.open_store_of
"""Open the store the arguments name (:func:`store.cliparser.open_store_of`)."""


# --- init, vkey --------------------------------------------------------------------------------


def _init_key(path: str, origin: str, tenant: str) -> tuple[SignerKey, bool]:
    """The log key in ``path``, made there (mode 0600) when there is none; and whether made."""
    try:
        return ui.read_log_key(path), False
    except FileNotFoundError:
        key = generate_key(origin)
        # Fail before writing anything when the tenant log's key name is not valid.
        check_key_name(f"{origin}/{tenant}")
        create_private(path, (key.format() + "\n").encode("utf-8"))
        return key, True


def _create(args: argparse.Namespace, origin: str) -> tuple[SignerKey, str, bool]:
    """Initialise the store the arguments name with base ``origin`` and the log key file
    (made when missing): :func:`store.init_store`, as ``init`` does. Returns the key, the key
    file's path and whether this call made the key."""
    db, pg = ui.store_location(args)
    tenant = ui.parse_tenant(args)
    path = ui.key_path(args, db)
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
    return key, path, created


def _cmd_init(args: argparse.Namespace) -> int:
    origin = ui.parse_text(args.origin, "--origin")
    key, path, created = _create(args, origin)
    db, pg = ui.store_location(args)
    tenant = ui.parse_tenant(args)
    with open_store(db=db, postgres=pg, tenant=tenant, key=key) as store:
        vkey = store.log_vkey
        as_json = {"origin": store.origin, "vkey": vkey, "key": path, "created": created}
        return ui.output(args, as_json, vkey + "\n")


def _cmd_vkey(args: argparse.Namespace) -> int:
    with _open(args) as store:
        write_stdout(store.log_vkey + "\n")
    return EXIT_OK


# --- leases --------------------------------------------------------------------------------------


def _write_lease(args: argparse.Namespace, lease: Lease) -> int:
    return ui.output(args, _jsonable(lease), f"{lease.epoch}\n")


def _cmd_acquire(args: argparse.Namespace) -> int:
    run = ui.parse_run(args.run)
    owner = ui.parse_text(args.owner, "--owner")
    ttl = decimal_arg(args.ttl, "--ttl", 1)
    with _open(args) as store:
        return _write_lease(args, store.acquire(run, owner, ttl))


def _cmd_renew(args: argparse.Namespace) -> int:
    run = ui.parse_run(args.run)
    owner = ui.parse_text(args.owner, "--owner")
    epoch = decimal_arg(args.epoch, "--epoch", 1)
    ttl = decimal_arg(args.ttl, "--ttl", 1)
    with _open(args) as store:
        return _write_lease(args, store.renew(run, owner, epoch, ttl))


def _cmd_release(args: argparse.Namespace) -> int:
    run = ui.parse_run(args.run)
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
    run = ui.parse_run(args.run)
    epoch = decimal_arg(args.epoch, "--epoch", 1)
    if args.batch is not None:
        batch = _batch_from_file(args, run)
    else:
        batch = [_record_from_flags(args, run)]
    with _open(args) as store:
        records = store.append(epoch, batch)
    as_json = {"run": run, "records": [{"seq": r.seq, "hash": b64encode(r.hash)} for r in records]}
    return ui.output(args, as_json, "".join(f"{r.seq} {b64encode(r.hash)}\n" for r in records))


def _cmd_seal(args: argparse.Namespace) -> int:
    run = ui.parse_run(args.run)
    epoch = decimal_arg(args.epoch, "--epoch", 1)
    outcome = utf8_arg(args.outcome, "--outcome")
    try:
        check_outcome(outcome)
    except MalformedError as e:
        raise MalformedError(f"--outcome: {e}") from None
    with _open(args) as store:
        seal: Seal = store.seal(run, epoch, outcome)
    return ui.output(
        args, _jsonable(seal), f"position {seal.position}\nhead {b64encode(seal.head)}\n"
    )


def _cmd_head(args: argparse.Namespace) -> int:
    run = ui.parse_run(args.run)
    with _open(args) as store:
        head = store.head(run)
    as_json = {"run": run, "seq": head.seq, "hash": b64encode(head.hash)}
    return ui.output(args, as_json, f"seq {head.seq}\nhash {b64encode(head.hash)}\n")


def _cmd_admitted(args: argparse.Namespace) -> int:
    key = ui.parse_text(args.key, "KEY")
    with _open(args) as store:
        run = store.admitted_as(key)
    if run is None:
        return ui.output(args, {"key": key, "run": None}, f"{key} is not admitted\n")
    return ui.output(args, {"key": key, "run": run}, f"{run}\n")


def _cmd_forget_admissions(args: argparse.Namespace) -> int:
    older_than = decimal_arg(args.older_than, "--older-than", 0)
    with _open(args) as store:
        n = store.forget_admissions(older_than)
    return ui.output(args, {"forgotten": n}, f"forgotten {n}\n")


def _cmd_waiting(args: argparse.Namespace) -> int:
    limit = 100 if args.limit is None else decimal_arg(args.limit, "--limit", 1)
    with _open(args) as store:
        waiting = store.waiting_runs(limit)
    rows = [_jsonable(w) for w in waiting]
    text = "".join(
        f"{w.run} until {w.until} "
        + ("instant" if w.message is None else f"message {w.message}")
        + "\n"
        for w in waiting
    )
    return ui.output(args, {"waiting": rows}, text)


def _record_json(r: Record) -> bytes:
    return json.dumps(record_object(r), ensure_ascii=False).encode("utf-8") + b"\n"


def _record_text(r: Record) -> bytes:
    return b"%d %s %s\n" % (r.seq, b64encode(r.hash).encode(), r.raw)


def _cmd_read(args: argparse.Namespace) -> int:
    run = ui.parse_run(args.run)
    seq = 1 if args.from_seq is None else decimal_arg(args.from_seq, "--from", 1)
    with _open(args) as store:
        # Page by page: what is printed is one checked chain, and a fault stops the listing.
        for page in read_pages(store, run, seq, READ_PAGE):
            if args.json:
                write_stdout(b"".join(_record_json(r) for r in page))
            else:
                write_stdout(b"".join(_record_text(r) for r in page))
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
    runs = [ui.parse_run(r) for r in args.runs]
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
        ui.output(args, {"origin": cp.origin, "size": cp.size, "runs": results}, "")
    return EXIT_OK


# --- checkpoints ---------------------------------------------------------------------------------


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    if args.unsigned:
        with _open(args) as store:
            cp = store.checkpoint()
        as_json = {"origin": cp.origin, "size": cp.size, "root": b64encode(cp.root)}
        return ui.output(args, as_json, cp.format())
    with _open(args, key=True) as store:
        note = store.sign_checkpoint()
    cp = Checkpoint.parse(parse_note(note)[0])
    as_json = {
        "origin": cp.origin,
        "size": cp.size,
        "root": b64encode(cp.root),
        "note": note.decode("utf-8"),
    }
    return ui.output(args, as_json, note)


def _log_of(store: JournalStore, inbox: bool) -> PublishedLog:
    """The tenant's log, or with ``inbox`` its inbox log (:attr:`store.inbox.core.Inbox.log`,
    whose checkpoints cover every buffered event)."""
    return store.inbox.log if inbox else store


def _cmd_publish(args: argparse.Namespace, *, inbox: bool = False) -> int:
    """``publish``, and with ``inbox`` ``event publish``: the same, on the inbox log."""
    if args.witness:
        if args.file is not None:
            raise UsageError("give FILE (a cosigned copy) or --witness, not both")
        return _publish_to_witnesses(args, inbox)
    for flag, value in (("--policy", args.policy), ("--timeout", args.timeout)):
        if value is not None:
            raise UsageError(f"{flag} goes with --witness")
    files = args.witness_keys
    if sum(is_stdin(f) for f in [args.file, *files]) > 1:
        raise UsageError("only one input can be standard input ('-')")
    witness_keys = ui.parse_vkeys(args.witness_key, files, "witness")
    note = read_input(args.file, MAX_NOTE_SIZE)
    parse_note(note)  # refuse a malformed note here, with the note's own message
    with _open(args) as store:
        write_stdout(_log_of(store, inbox).add_cosignatures(note, witness_keys=witness_keys))
    return EXIT_OK


def _publish_to_witnesses(args: argparse.Namespace, inbox: bool) -> int:
    """``publish --witness``: :func:`store.publish.publish_to_witnesses`, then its report."""
    specs = [ui.parse_witness(w) for w in args.witness]
    if args.witness_key or args.witness_keys:
        raise UsageError("--witness-key and --witness-keys go with FILE (--witness names its keys)")
    timeout = (
        ui.DEFAULT_PUBLISH_TIMEOUT
        if args.timeout is None
        else decimal_arg(args.timeout, "--timeout", 1)
    )
    policy = ui.parse_policy(args.policy)
    clients = witness_clients(specs, timeout=timeout, what="--witness")
    try:
        with _open(args, key=True) as store:
            log = _log_of(store, inbox)
            done = publish_to_witnesses(log, clients, policy=policy, timeout=timeout)
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


def _kept_line(kept: KeptCheckpoint) -> str:
    signers = " ".join(f"{name}+{key_id:08x}" for name, key_id in kept.signers)
    return f"{kept.size} {b64encode(kept.root)} {signers}\n"


def _cmd_published(args: argparse.Namespace) -> int:
    with _open(args) as store:
        kept = published_checkpoints(store)
    as_json = {"checkpoints": [_kept_json(k) for k in kept]}
    return ui.output(args, as_json, "".join(_kept_line(k) for k in kept))


def _sign_now(args: argparse.Namespace) -> bytes:
    # Only now is the log key needed: a second handle that can sign.
    with _open(args, key=True) as signing:
        return signing.sign_checkpoint()


def _cmd_prove(args: argparse.Namespace) -> int:
    run = ui.parse_run(args.run)
    with _open(args) as store:
        data = prove_run(store, run, sign=lambda: _sign_now(args)).format()
    ui.write_output(args.out, data)
    return EXIT_OK


# --- export, restore -----------------------------------------------------------------------------


def _cmd_export(args: argparse.Namespace) -> int:
    files = args.witness_keys
    if sum(f == "-" for f in files) > 1:
        raise UsageError("only one input can be standard input ('-')")
    witness_keys = ui.parse_vkeys(args.witness_key, files, "witness")
    record_keys = ui.parse_vkeys(args.record_key, [], "record")
    with _open(args) as store:
        if is_stdin(args.out):
            export_store(
                store, sys.stdout.buffer, witness_keys=witness_keys, record_keys=record_keys
            )
            sys.stdout.buffer.flush()
        else:
            with output_file(args.out, ".tlog-store-", name_path=True) as f:
                export_store(store, f, witness_keys=witness_keys, record_keys=record_keys)
    return EXIT_OK


def _base_origin(origin: str, tenant: str) -> str:
    """The base origin of an export's tenant log origin ``<base>/<tenant>``."""
    base, sep, last = origin.rpartition("/")
    if not sep or not base or last != tenant:
        raise UsageError(
            f"the export's log origin {origin} is not <origin>/{tenant}: choose the tenant "
            "with --tenant"
        )
    return base


def _cmd_restore(args: argparse.Namespace) -> int:
    path = utf8_arg(args.file, "FILE")
    record_keys = ui.parse_vkeys(args.record_key, [], "record") if args.record_key else None
    with open(path, "rb") as f:  # an unreadable file is reported as such, before the store
        header = next(read_export(f))
    assert isinstance(header, HeaderItem)
    if args.key is not None or os.environ.get(ui.ENV_KEY):
        # From the source's log key: create the store (init is idempotent for the same origin
        # and key) with the export's origin, then replay into it. The key must exist: a new
        # one could not verify the export.
        ui.read_existing_log_key(ui.key_path(args, ui.store_location(args)[0]))
        _create(args, _base_origin(header.header.origin, ui.parse_tenant(args)))
    else:
        db, _ = ui.store_location(args)
        if db is not None and not os.path.exists(db):
            raise UsageError(
                f"no store at {db}: pass --key FILE, the source store's log key, to create it "
                "from the export (or run 'tlog-store init' with that key first)"
            )
    with _open(args) as store:
        summary = restore_store(
            store,
            path,
            record_keys=record_keys,
            require_record_signatures=args.require_record_signatures,
        )
    result = _jsonable(summary)
    assert isinstance(result, dict)
    lines = []
    for k, v in result.items():
        if isinstance(v, dict):  # the inbox's summary, one line a figure
            lines += [f"{k}_{name} {figure}\n" for name, figure in v.items()]
        elif v is not None:  # no inbox: no line
            lines.append(f"{k} {v}\n")
    return ui.output(args, result, "".join(lines))


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
        (
            FencedError,
            LeaseHeldError,
            LeaseNotHeldError,
            DuplicateEffectError,
            DuplicateAdmissionError,
            RunSealedError,
        ),
        EXIT_REFUSED,
    ),
)
"""How ``tlog-store``'s own exceptions map to exit statuses, checked in this order before the
common rules of :mod:`tlog.cli.run` (which give 2 to MalformedError, UsageError, OSError,
UnicodeDecodeError and argparse errors). Every VerificationError gives 1 — among them
RestoreError and NotSealedError (``prove`` of a run not in the log); SealConflictError (a seal
with another outcome than the run's) is a RunSealedError and gives 3. The one statement of the
mapping; ``tlog-store --help`` tells users."""


@dataclasses.dataclass(frozen=True)
class _StoreCommand(Command):
    """A :class:`tlog.cli.run.Command` whose own parser takes the store options too, so that
    they may come before the verb (``tlog-store --db journal.db head run-1``) as well as after."""

    def parser(self) -> clirun.ArgumentParser:
        p = super().parser()
        ui.command_store_options(p)
        return p


def command() -> Command:
    """The ``tlog-store`` command, each verb declared once with :func:`store.cliparser.verb`.

    Built on each call, so that the handlers are looked up when the command runs.
    """
    return _StoreCommand(
        prog="tlog-store",
        description="A journal store: hash-chained runs, their Merkle log, checkpoints, proofs.",
        epilog=ui.MAIN,
        statuses=_STATUSES,
        # publish --witness and deliver need requests, serve aiohttp, --postgres psycopg.
        extras=("store", "postgres"),
        verbs=(
            verb("init", "initialise a store", ui.INIT, _cmd_init, ui.init_args, ui.KEY_JSON),
            verb("vkey", "print the tenant log's vkey", ui.VKEY, _cmd_vkey, None, ui.PLAIN),
            verb("acquire", "claim a run's lease", ui.ACQUIRE, _cmd_acquire, ui.acquire_args),
            verb("renew", "extend a lease", ui.RENEW, _cmd_renew, ui.renew_args),
            verb("release", "release a lease", ui.RELEASE, _cmd_release, ui.release_args, ui.PLAIN),
            verb("append", "append records to a run", ui.APPEND, _cmd_append, ui.append_args),
            verb("seal", "seal a run into the log", ui.SEAL, _cmd_seal, ui.seal_args),
            verb("head", "a run's last seq and hash", ui.HEAD, _cmd_head, ui.run_positional),
            verb(
                "admitted",
                "the run holding an admission key",
                ui.ADMITTED,
                _cmd_admitted,
                ui.admitted_args,
            ),
            verb(
                "forget-admissions",
                "retire old admission keys",
                ui.FORGET_ADMISSIONS,
                _cmd_forget_admissions,
                ui.forget_admissions_args,
            ),
            verb(
                "waiting", "runs waiting on a suspension", ui.WAITING, _cmd_waiting, ui.waiting_args
            ),
            verb("read", "print a run's records", ui.READ, _cmd_read, ui.read_args),
            verb("verify", "check runs' chains and seals", ui.VERIFY, _cmd_verify, ui.verify_args),
            verb(
                "checkpoint",
                "sign and keep the current checkpoint",
                ui.CHECKPOINT,
                _cmd_checkpoint,
                ui.checkpoint_args,
                ui.KEY_JSON,
            ),
            verb(
                "publish",
                "keep a cosigned checkpoint, or get one from witnesses",
                ui.PUBLISH,
                _cmd_publish,
                ui.publish_args,
                ui.KEY,
            ),
            verb("published", "list kept checkpoints", ui.PUBLISHED, _cmd_published),
            verb(
                "prove",
                "write a tlog-proof for a sealed run",
                ui.PROVE,
                _cmd_prove,
                ui.prove_args,
                ui.KEY,
            ),
            verb(
                "export",
                "write the tenant's export",
                ui.EXPORT,
                _cmd_export,
                ui.export_args,
                ui.PLAIN,
            ),
            verb(
                "restore",
                "replay an export into an empty store",
                ui.RESTORE,
                _cmd_restore,
                ui.restore_args,
                ui.KEY_JSON,
            ),
            *outbox_verbs(),
            *tiles_verbs(),
            event_verb(
                verb(
                    "publish",
                    "get the inbox checkpoint cosigned, or keep a cosigned copy",
                    INBOX_PUBLISH,
                    lambda a: _cmd_publish(a, inbox=True),
                    ui.publish_args,
                    ui.KEY,
                )
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
