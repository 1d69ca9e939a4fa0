"""The command line of ``tlog-store`` as its user writes and reads it.

:mod:`store.cli` runs the verbs; this module holds what it declares and reads them with:

* reading the arguments: the store options (:func:`store_location`, :func:`parse_tenant`,
  :func:`key_path`, the flags first, then the environment variables ``TLOG_STORE_DB``,
  ``TLOG_STORE_POSTGRES`` and ``TLOG_STORE_KEY``), the log key file (:func:`read_log_key`), and
  the values of other arguments (``parse_*``), each refused with a message naming its flag;
* declaring the arguments: :func:`verb` makes a :class:`tlog.cli.run.Verb` whose parser has the
  store options (:func:`store_options`) before the verb's own arguments (one function per verb,
  ``<verb>_args``). A verb's *options* say which shared options it gets: ``"json"`` adds
  ``--json``; with ``"key"`` the help says that the verb reads ``--key`` (every verb accepts
  it, so that one set of store options serves them all);
* the help texts that ``tlog-store --help`` and ``tlog-store VERB --help`` print after the
  arguments (``MAIN``, then one per verb): each verb's formats, outputs, exit statuses and
  examples, the user's documentation.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence

from store.api import JournalStore
from store.open import open_store
from store.publish import DEFAULT_TIMEOUT
from tlog.cli.files import input_name, is_stdin, output_file, read_input, read_key_file
from tlog.cli.run import Verb, utf8_arg, write_stdout
from tlog.encoding import parse_decimal
from tlog.errors import MalformedError, UsageError
from tlog.journal import check_run_id, check_tenant
from tlog.keys import SignerKey
from tlog.note import MAX_NOTE_SIZE, TYPE_ED25519
from tlog.policy import Policy

ENV_DB = "TLOG_STORE_DB"
ENV_POSTGRES = "TLOG_STORE_POSTGRES"
ENV_KEY = "TLOG_STORE_KEY"
DEFAULT_TENANT = "default"

DEFAULT_PUBLISH_TIMEOUT = DEFAULT_TIMEOUT
"""Seconds ``publish --witness`` waits for the witnesses, all requests included."""

# A verb's options (:attr:`tlog.cli.run.Verb.options`), read by :func:`store_options`.
JSON = frozenset({"json"})
KEY_JSON = frozenset({"key", "json"})
KEY = frozenset({"key"})
PLAIN = frozenset[str]()


# --- reading the arguments ---------------------------------------------------------------------


def parse_text(text: str, what: str) -> str:
    """A non-empty UTF-8 command-line string without control characters."""
    utf8_arg(text, what)
    if not text:
        raise MalformedError(f"{what} is empty")
    if any(c < " " or c == "\x7f" for c in text):
        raise MalformedError(f"{what} contains a control character")
    return text


def parse_run(text: str) -> str:
    """A RUN argument: a valid run ID (:func:`tlog.journal.check_run_id`)."""
    check_run_id(utf8_arg(text, "RUN"))
    return text


def parse_vkeys(flags: Sequence[str], files: Sequence[str], what: str) -> list[str]:
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


def store_location(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(db, postgres): the flags, else the environment; exactly one must be set."""
    if args.db is not None and args.postgres is not None:
        # One before the verb, the other after it (argparse refuses both on one side).
        raise UsageError("give --db or --postgres, not both")
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


def open_store_of(args: argparse.Namespace, *, key: bool = False) -> JournalStore:
    """Open the store the arguments name, for their tenant; with the log key when ``key``."""
    db, pg = store_location(args)
    tenant = parse_tenant(args)
    if db is not None and not os.path.exists(db):
        # Opening it would create an empty database there.
        raise UsageError(f"no store at {db} (create one with 'tlog-store init')")
    if db is not None and os.path.isdir(db):
        raise UsageError(f"{db} is a directory, not a store file")
    signer = read_existing_log_key(key_path(args, db)) if key else None
    return open_store(db=db, postgres=pg, tenant=tenant, key=signer)


def output(args: argparse.Namespace, as_json: object, text: str | bytes) -> int:
    """Print ``as_json`` as one indented JSON object with --json, else ``text``; 0, the verb
    succeeded. The one way a ``tlog-store`` verb prints its result."""
    if getattr(args, "json", False):
        write_stdout(json.dumps(as_json, indent=2, ensure_ascii=False) + "\n")
    else:
        write_stdout(text)
    return 0


def write_output(path: str, data: bytes) -> None:
    """``data`` to standard output (``-``) or atomically to the file ``path`` (a proof, a
    receipt): never a truncated file that looks complete."""
    if is_stdin(path):
        write_stdout(data)
        return
    with output_file(path, ".tlog-store-", name_path=True) as f:
        f.write(data)


def parse_tenant(args: argparse.Namespace) -> str:
    """The --tenant argument (``default`` when not given): a valid tenant
    (:func:`tlog.journal.check_tenant`)."""
    tenant: str = DEFAULT_TENANT if args.tenant is None else utf8_arg(args.tenant, "--tenant")
    check_tenant(tenant)
    return tenant


def chosen_tenant(args: argparse.Namespace) -> str | None:
    """The --tenant argument when it was given (valid), else None: for the verbs that act on
    every tenant unless one is named."""
    return None if args.tenant is None else parse_tenant(args)


def key_path(args: argparse.Namespace, db: str | None) -> str:
    """The log key file: --key, else TLOG_STORE_KEY, else (SQLite only) ``<db>.key``."""
    if args.key is not None:
        return str(utf8_arg(args.key, "--key"))
    env = os.environ.get(ENV_KEY)
    if env:
        return env
    if db is not None:
        return db + ".key"
    raise UsageError(f"with --postgres the log key must be given: --key FILE (or {ENV_KEY})")


def read_log_key(path: str) -> SignerKey:
    """The log key in key file ``path``, which must be an Ed25519 (type 0x01) key.

    FileNotFoundError when there is none (``init`` makes one then); see
    :func:`read_existing_log_key` for the verbs that need one."""
    key = read_key_file(path)
    if key.key_type != TYPE_ED25519:
        raise UsageError(f"key file {path} is not an Ed25519 (type 0x01) log key")
    return key


def read_existing_log_key(path: str) -> SignerKey:
    """:func:`read_log_key`, for a verb that signs: no file is a UsageError saying where the
    key was looked for and how to name it (a restored copy, say, has no ``<db>.key`` of its
    own)."""
    try:
        return read_log_key(path)
    except FileNotFoundError:
        raise UsageError(
            f"no log key at {path}: pass the store's key file with --key FILE (or {ENV_KEY})"
        ) from None


def parse_witness(text: str) -> tuple[str, str]:
    """``URL=VKEY`` split at the first ``=`` (a vkey's base64 may end in ``=``, a witness
    URL holds none)."""
    url, sep, vkey = utf8_arg(text, "--witness").partition("=")
    if not sep or not url or not vkey:
        raise UsageError(f"--witness {text!r} is not URL=VKEY")
    return url, vkey


def parse_policy(path: str | None) -> Policy | None:
    """The C2SP tlog-policy in file ``path`` (``-``: standard input), or None without one."""
    if path is None:
        return None
    try:
        return Policy.parse(read_input(path, MAX_NOTE_SIZE))
    except MalformedError as e:
        raise MalformedError(f"policy {input_name(path)}: {e}") from None


# --- declaring the arguments -------------------------------------------------------------------


def _store_option_group(p: argparse.ArgumentParser, key_help: str, *, before_verb: bool) -> None:
    """--db | --postgres, --tenant and --key, on the command's parser or on a verb's.

    Both parsers take them, so that they may come before the verb or after it. A verb's copies
    default to nothing (``argparse.SUPPRESS``): argparse copies every attribute of the verb's
    namespace over the command's, so a default there would undo a value given before the
    verb. The real defaults are the command parser's. Given on both sides, the later wins.
    """
    # --tenant's default is None, not "default": parse_tenant supplies that, and the verbs
    # that act on every tenant can tell a tenant named from none (chosen_tenant).
    none = None if before_verb else argparse.SUPPRESS

    def shown(text: str) -> str:
        # The command's help lists them once, in its epilog (MAIN), with more to say.
        return argparse.SUPPRESS if before_verb else text

    g = p.add_argument_group("store options")
    where = g.add_mutually_exclusive_group()
    where.add_argument(
        "--db", default=none, metavar="PATH", help=shown(f"SQLite store file (env {ENV_DB})")
    )
    where.add_argument(
        "--postgres",
        default=none,
        metavar="URL",
        help=shown(f"PostgreSQL URL (env {ENV_POSTGRES})"),
    )
    g.add_argument("--tenant", default=none, metavar="T", help=shown("tenant (default: default)"))
    g.add_argument("--key", default=none, metavar="FILE", help=shown(key_help))


def command_store_options(p: argparse.ArgumentParser) -> None:
    """The store options on the command's own parser: ``tlog-store --db PATH VERB ...``."""
    _store_option_group(
        p, f"log signer key, for the verbs that sign (env {ENV_KEY})", before_verb=True
    )


def store_options(p: argparse.ArgumentParser, options: frozenset[str]) -> None:
    """The store options every verb takes, and ``--json`` for the verbs with ``"json"``.

    Added before the verb's own arguments, so that usage lines and help list them first.
    """
    # Every verb takes --key, so that one set of store options serves them all; only the
    # verbs with the option "key" read it.
    _store_option_group(
        p,
        (
            f"log signer key (env {ENV_KEY}; default with SQLite: <db path>.key)"
            if "key" in options
            else "log signer key (not read by this verb)"
        ),
        before_verb=False,
    )
    if "json" in options:
        p.add_argument("--json", action="store_true", help="print JSON")


def verb(
    name: str,
    help_text: str,
    epilog: str,
    handler: Callable[[argparse.Namespace], int],
    arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    options: frozenset[str] = JSON,
) -> Verb:
    """A verb of ``tlog-store``: its own ``arguments`` after the store options.

    Not :attr:`tlog.cli.run.Command.common`, which adds shared options after the verb's own:
    ``tlog-store``'s usage lines and help have always listed the store options first.
    """

    def add(p: argparse.ArgumentParser) -> None:
        store_options(p, options)
        if arguments is not None:
            arguments(p)

    return Verb(name, help_text, epilog, handler, add, options=options)


def run_positional(p: argparse.ArgumentParser) -> None:
    """RUN, the first argument of the verbs about one run (``head``'s only one)."""
    p.add_argument("run", metavar="RUN", help="run ID")


def init_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--origin", required=True, metavar="ORIGIN", help="base origin of the logs")


def acquire_args(p: argparse.ArgumentParser) -> None:
    run_positional(p)
    p.add_argument("--owner", required=True, metavar="O", help="who claims the run")
    p.add_argument("--ttl", required=True, metavar="SECONDS", help="lease length in seconds")


def renew_args(p: argparse.ArgumentParser) -> None:
    run_positional(p)
    p.add_argument("--owner", required=True, metavar="O", help="the lease's owner")
    p.add_argument("--epoch", required=True, metavar="E", help="the lease's epoch")
    p.add_argument("--ttl", required=True, metavar="SECONDS", help="new lease length")


def _run_epoch(p: argparse.ArgumentParser, epoch_help: str) -> None:
    run_positional(p)
    p.add_argument("--epoch", required=True, metavar="E", help=epoch_help)


def release_args(p: argparse.ArgumentParser) -> None:
    _run_epoch(p, "the lease's epoch")


FENCE_HELP = "the run's lease epoch, when it has a lease (a run never leased takes any)"


def append_args(p: argparse.ArgumentParser) -> None:
    _run_epoch(p, FENCE_HELP)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--kind", metavar="K", help="the record's kind (one record)")
    what.add_argument("--batch", metavar="FILE", help="JSON Lines batch file, or - for stdin")
    p.add_argument("--data", metavar="JSON", help="the record's data (JSON)")
    p.add_argument("--case", metavar="C", help="the record's case ID")
    p.add_argument("--effect-key", metavar="K", help="the record's effect key")


def seal_args(p: argparse.ArgumentParser) -> None:
    _run_epoch(p, FENCE_HELP)
    p.add_argument("--outcome", required=True, metavar="O", help="the run's outcome")


def admitted_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", metavar="KEY", help="admission key: SOURCE/ID")


def forget_admissions_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--older-than",
        required=True,
        metavar="UNIX_SECONDS",
        help="retire the keys claimed before this store-clock time",
    )


def waiting_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", metavar="N", help="at most N runs (default 100)")


def read_args(p: argparse.ArgumentParser) -> None:
    run_positional(p)
    p.add_argument("--from", dest="from_seq", metavar="SEQ", help="first seq (default 1)")


def verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="*", metavar="RUN", help="run IDs (default: every run)")


def checkpoint_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--unsigned", action="store_true", help="print the text only; no key needed")


def _repeated(p: argparse.ArgumentParser, flag: str, metavar: str, help_text: str) -> None:
    p.add_argument(flag, action="append", default=[], metavar=metavar, help=help_text)


def publish_args(p: argparse.ArgumentParser) -> None:
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


def prove_args(p: argparse.ArgumentParser) -> None:
    run_positional(p)
    p.add_argument("--out", metavar="FILE", help="proof file (default: stdout)")


def export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="FILE", help="export file, or - for stdout (default)")
    _repeated(
        p,
        "--witness-key",
        "VKEY",
        "one more witness to declare; the store declares those it kept lines of (repeatable)",
    )
    _repeated(p, "--witness-keys", "FILE", "witness vkeys, one per line (repeatable)")
    _repeated(p, "--record-key", "VKEY", "an Ed25519 key that signed records (repeatable)")


def restore_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="export file")
    _repeated(p, "--record-key", "VKEY", "a trusted record key (repeatable; default: the export's)")
    p.add_argument(
        "--require-record-signatures",
        action="store_true",
        help="refuse an export holding an unsigned record",
    )


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6: ``[HOST]:PORT``) as (host, port); port canonical decimal 0..65535."""
    utf8_arg(text, "--listen")
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise MalformedError(f"--listen {text!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise MalformedError(f"--listen {text!r}: write an IPv6 host in brackets, [HOST]:PORT")
    if not host or any(c.isspace() or c < " " or c in "[]" for c in host):
        raise MalformedError(f"--listen {text!r} has no usable host")
    return host, parse_decimal(port_text, "--listen port", 65535)


def parse_token_file(path: str) -> str:
    """The bearer token in file ``path``: its text, one trailing newline allowed."""
    data = read_input(path, 4097)
    text = data[:-1] if data.endswith(b"\n") else data
    try:
        return text.decode("ascii")
    except UnicodeDecodeError:
        raise MalformedError(f"token file {input_name(path)} is not ASCII") from None


# --- help texts ------------------------------------------------------------------------------


MAIN = """\
Run 'tlog-store VERB --help' for the formats and examples of a verb.

store options (every verb; before or after the verb -- given on both sides, the later wins):
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
     started, admission key already issued, run sealed (or sealed with another outcome)
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

INIT = """\
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

VKEY = """\
Prints the tenant log's vkey again, as the store recorded it at init: the public half of the
log key under the name <origin>/<tenant>. No key file is read.

examples:
  tlog-store vkey --db journal.db --tenant acme
"""

ACQUIRE = """\
Claims RUN for TTL whole seconds (>= 1) and prints the new epoch, the fencing token every
append and seal must carry. A live lease is refused (exit 3), even to its own owner; a claim
always bumps the epoch, which fences out the previous holder. --json prints the lease (run,
owner, epoch, expires_at).

examples:
  EPOCH=$(tlog-store acquire run-1 --owner worker-a --ttl 60)
"""

RENEW = """\
Extends the exact live lease (OWNER, EPOCH) by TTL seconds from now, keeping its epoch, and
prints the epoch (--json: the lease). A released, lapsed or taken-over lease is refused (exit 3):
the caller has lost the run.

examples:
  tlog-store renew run-1 --owner worker-a --epoch "$EPOCH" --ttl 60
"""

RELEASE = """\
Marks the lease at EPOCH expired, keeping its epoch so that the next claim fences it. Idempotent
and never refused; prints nothing.

examples:
  tlog-store release run-1 --epoch "$EPOCH"
"""

APPEND = """\
Appends records to RUN under EPOCH. When RUN has a lease (live, lapsed or released: the store
keeps its epoch), EPOCH must equal its epoch, else exit 3 (fenced). A run never leased is not
fenced: it takes any epoch, even one below its last record's -- that is how 'restore' replays
each record under its own epoch, an export carrying no leases. To be fenced, acquire the run
first: its first epoch is above every epoch its records carry.
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

SEAL = """\
Appends RUN's seal record (kind RunSealed, data {"outcome": OUTCOME}, under EPOCH, signed like
any record when the store signs records), freezes RUN, and enters its head -- the seal
record's hash, which covers the outcome -- into the tenant's Merkle log as the leaf
SHA-256(0x00 || head), at the next log position. EPOCH is fenced as for 'append' (a re-seal
too). The first seal wins: sealing again with the same OUTCOME changes nothing and prints the
same position and head (--json: "already": true), so a retry is safe; with another OUTCOME it is
refused (exit 3), naming both. Later appends are refused (exit 3), and no append may use the
kind RunSealed (exit 2). OUTCOME is a letter, then up to 63 of [A-Za-z0-9_.-] (as a record
kind). Prints 'position N' and 'head HASH' (--json: run, position, head, outcome, already).

examples:
  tlog-store seal run-1 --epoch "$EPOCH" --outcome ok
"""

HEAD = """\
Prints RUN's last record: 'seq N' and 'hash HASH' (seq 0 and 32 zero bytes for a run with no
records). --json prints run, seq and hash.

examples:
  tlog-store head run-1
"""

ADMITTED = """\
Prints the run that holds the admission key KEY (SOURCE/ID: the source and id of a run's
RunAdmitted record), or 'KEY is not admitted' (still exit 0). A read, not a claim: a run is
admitted, and a second one refused, by appending its RunAdmitted record. --json prints key and
run (null when not admitted).

examples:
  tlog-store admitted billing/inv-981
"""

FORGET_ADMISSIONS = """\
Retires the tenant's admission keys claimed before --older-than (whole Unix seconds of the
store clock) and prints 'forgotten N' (--json: {"forgotten": N}). Retiring a key reopens the
door it closed: a delivery with that key arriving later admits a new run, so the time must be
older than the emitter's retry horizon. Keys are kept forever unless this is run; the runs keep
their records and stay listed by their source.

examples:
  tlog-store forget-admissions --older-than "$(( $(date +%s) - 90 * 86400 ))"
"""

WAITING = """\
Prints the runs whose last record is a RunSuspended, soonest deadline first, at most --limit
(default 100): 'RUN until T instant' for a run waiting for the instant T, 'RUN until T message
M' for one waiting for the message with correlation key M until T (whole Unix seconds).
--json prints {"waiting": [{run, until, message, seq}, ...]}.

examples:
  tlog-store waiting --limit 20
"""

READ = """\
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

VERIFY = """\
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

CHECKPOINT = """\
Signs the tenant log's current checkpoint (origin, size, root) with the log key, keeps it among
the published checkpoints, and prints the signed note. --unsigned prints the checkpoint text
only, without the key and without keeping anything. --json prints origin, size, root (and note).

examples:
  tlog-store checkpoint > checkpoint
  tlog-store checkpoint --unsigned
"""

PUBLISH = """\
Two ways to get the kept checkpoints cosigned (so exports and proofs carry the cosignatures):

With FILE (standard input if absent or -): a cosigned copy of a checkpoint this store signed.
Its signature lines are merged into the kept checkpoint, and the merged note is printed. Every
cosignature to keep must be from a witness declared with --witness-key VKEY (or --witness-keys
FILE, one vkey per line; type 0x04 or 0x06, a 0x01 vkey read as 0x04) and must verify: a line
that does not verify is refused (exit 1), a line of an undeclared key or a plain Ed25519 (0x01)
signature -- which no export could carry -- is refused (exit 2); nothing is kept then. Lines
already kept need no key.

Either way the store remembers the key of every witness whose line the kept checkpoint holds,
so that 'export' declares it without being told.

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

PUBLISHED = """\
Lists the kept checkpoints by increasing size, one per line: 'SIZE ROOT SIGNER...', each signer
as NAME+KEYID (the log key, then any cosigners). --json adds each whole note.

examples:
  tlog-store published
"""

PROVE = """\
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

EXPORT = """\
Streams the tenant's whole journal -- the log key, the kept checkpoints with their
cosignatures, every sealed run by log position and every unsealed run, each with its records
exactly as stored -- in the tlog-toolkit export format (docs/export-format.md) to --out FILE
(default: standard output). A file is written under a temporary name and renamed when
complete; a failed export leaves no file (on standard output, whatever was written before the
failure is a partial export: discard it).

The export declares the keys its signatures need. Witnesses: the store remembers every witness
whose cosignature it kept ('publish') or that a restored export declared, and declares them
all; --witness-key VKEY (or --witness-keys FILE, one vkey per line; a type 0x01 vkey is read as
its cosignature/v1 form) declares more -- needed only for lines a store kept before it
remembered witness keys (a store created before schema version 3). Records: every key that
signed records (--record-key). An undeclared signer is refused (exit 2), naming the key.

examples:
  tlog-store export --out journal.export
  tlog-store export | gzip > journal.export.gz
"""

RESTORE = """\
With --key FILE, the source store's log key file: creates the store (as 'init' does, with the
origin of the export's header; an existing store must have that origin and key) and replays
FILE into it, in one command. Without --key the store must exist already.

Replays an export FILE into this tenant of an initialised, EMPTY store (no runs, no log, no
kept checkpoints; else exit 2). Pass 1 verifies the whole file against the store's own log key
-- every hash, link, signature, position and checkpoint root -- and writes nothing when it does
not verify (exit 1, naming the line). Pass 2 appends the records and seals the runs through the
store's own rules, keeps every exported checkpoint as it is, remembers the witness keys the
export declares, and checks that the store rebuilt exactly the export; a failure there (exit 1,
naming the line, run and record) leaves the target partially written: discard it. The target
has the same origin and log key as the source; exporting the restored store (no flags) gives
the same file byte for byte.

--record-key narrows the trusted record keys (default: those the export declares);
--require-record-signatures refuses unsigned records. Prints the summary, one 'name value'
line each: origin, checkpoints, runs, sealed_runs, records, signed_records, log_size,
log_root, digest (--json: one object).

examples:
  tlog-store restore journal.export --db copy.db --key journal.db.key
"""
