"""The ``tlog-witness`` command: run a C2SP tlog-witness and manage its state from the shell.

Verbs::

    tlog-witness init --name NAME [--dir DIR] [--mldsa] [--json]
    tlog-witness vkey [--key FILE]...
    tlog-witness add-log ORIGIN --key VKEY [--key VKEY]... [--qpd N] [--tiles URL]
    tlog-witness add-key ORIGIN VKEY
    tlog-witness set-tiles ORIGIN URL|none
    tlog-witness disable-log ORIGIN
    tlog-witness enable-log ORIGIN
    tlog-witness list-logs [--json]
    tlog-witness pull-logs FILE|URL [--dry-run] [--timeout SECONDS]
    tlog-witness evidence [--origin ORIGIN] [--limit N] [--json] [--show ID]
    tlog-witness export-state [--out FILE]
    tlog-witness import-state FILE
    tlog-witness serve [--listen HOST:PORT] [--name NAME] [--key FILE]... [--check] [...]
    tlog-witness feed [--once] [--interval S] [--timeout S] [--origin ORIGIN]... [--json]

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
``http(s)://`` URL (fetched with ``requests``, one timeout, at most
:data:`witness.pull.MAX_LIST_SIZE` bytes). It adds the logs it does not follow, adds a listed
key that an existing log lacks, and sets a log's qpd to the listed one. It never removes a log
or a key and never enables a disabled log (its keys and qpd are still updated). Each change is
written on its own and re-running converges, so an interrupted pull is safe to repeat. It
prints one line per change and a summary; ``--dry-run`` writes nothing.

``feed`` follows the logs that have a tiles URL (``add-log --tiles``, ``set-tiles``): it
fetches each one's checkpoint and the tiles a consistency proof needs, builds the proof and
submits it through the server's own add-checkpoint checks and commit (:mod:`witness.feed`),
beside ``serve`` on the same state. ``--once`` exits 1 when a log was refused (a fork, a bad
signature), 4 when a round was unusable (a fetch failed), else 0.

Exit status (:func:`main` is the one place that maps exceptions to statuses):

==  ===================================================================================
 0  success
 1  verification failure: a cosigned note in an imported state does not verify with its
    log's keys; the state holds data of the wrong shape (CorruptStateError)
 2  unusable input or usage: malformed data, bad arguments, unreadable file, a refused
    change (an origin already configured, an import that would move a log backwards),
    a port that cannot be bound; a verb that needs an extra that is not installed
    (``serve``, ``pull-logs URL``, ``conformance``: ``pip install 'tlog-toolkit[witness]'``;
    ``--postgres``: ``[postgres]``)
 4  backend trouble: the database failed (nothing written), or a COMMIT got no verdict (the
    write may or may not have landed: read back before retrying); a log list that cannot be
    fetched (network, timeout, HTTP status other than 200)
==  ===================================================================================

Each verb is one call of the library (:mod:`witness.settings` finds the config, state and
keys; :mod:`witness.admin`, :mod:`witness.pull`, :mod:`witness.serving` do the work) plus
argument parsing and printing, declared once in :data:`COMMAND` (help texts:
:mod:`witness.cli_help`).

Every failure prints exactly one line on standard error, ``tlog-witness: <verb>: <message>``,
and never a traceback. A closed standard output ends the command silently with status 2.
``serve`` runs until SIGTERM or SIGINT, then lets requests in flight finish (at most
``shutdown_timeout`` seconds) and exits 0; a SIGINT at any other moment exits 130.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tlog.cli import files as clifiles
from tlog.cli import run as clirun
from tlog.cli.files import is_stdin, output_file, read_input
from tlog.cli.run import Command, Exit, Verb, decimal_arg, utf8_arg, write_stdout
from tlog.encoding import b64encode
from tlog.errors import UsageError
from tlog.note import check_key_name
from witness import config as wconfig
from witness.admin import evidence_files, evidence_json, find_evidence, import_parsed, init_witness
from witness.cli_help import (
    EPILOG_ADD_KEY,
    EPILOG_ADD_LOG,
    EPILOG_DISABLE,
    EPILOG_EVIDENCE,
    EPILOG_EXPORT,
    EPILOG_FEED,
    EPILOG_IMPORT,
    EPILOG_INIT,
    EPILOG_LIST,
    EPILOG_MAIN,
    EPILOG_PULL,
    EPILOG_SET_TILES,
    EPILOG_VKEY,
    serve_epilog,
)
from witness.config import DEFAULT_FEED_INTERVAL, DEFAULT_FEED_TIMEOUT
from witness.errors import FetchError
from witness.pull import DEFAULT_FETCH_TIMEOUT, pull_logs, quote, read_log_list
from witness.settings import (
    ENV_CONFIG,
    ENV_DB,
    ENV_POSTGRES,
    PROG,
    ServeSettings,
    check_lines,
    cosigner,
    find_config,
    flag,
    key_paths,
    limit_text,
    locate_state,
    nonempty,
    open_existing,
    read_witness_keys,
    refuse_missing,
    serve_settings,
)
from witness.sqlstate import (
    BackendError,
    CommitUnknownError,
    CorruptStateError,
    StateError,
    parse_state,
)
from witness.state import WitnessState
from witness.statecheck import check_tiles_url

if TYPE_CHECKING:
    from witness.feed import FeedResult

__all__ = ["COMMAND", "FetchError", "ServeSettings", "main", "serve_settings"]

EXIT_OK = clirun.EXIT_OK
EXIT_UNVERIFIED = clirun.EXIT_UNVERIFIED
EXIT_BAD_INPUT = clirun.EXIT_BAD_INPUT
EXIT_BACKEND = 4
EXIT_INTERRUPTED = 130  # the shell's 128 + SIGINT

MAX_KEY_FILE_SIZE = clifiles.MAX_KEY_FILE_SIZE
DEFAULT_EVIDENCE_LIMIT = 100


# --- input and output ------------------------------------------------------------------------


def _time(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return str(seconds)


def _json_line(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n"


def _origin_arg(text: str) -> str:
    return nonempty(text, "ORIGIN")


def _state_of(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """``(db, postgres)``: the state the arguments name (:func:`witness.settings.locate_state`)."""
    return locate_state(args.db, args.postgres, find_config(args.config))


def _open(args: argparse.Namespace) -> contextlib.AbstractContextManager[WitnessState]:
    """The existing state the arguments name, closed afterwards."""
    return open_existing(*_state_of(args))


# --- the verbs -------------------------------------------------------------------------------


def _cmd_init(args: argparse.Namespace) -> int:
    name = utf8_arg(args.name, "--name")
    check_key_name(name)
    directory = nonempty(args.dir, "--dir")
    db, pg = locate_state(args.db, args.postgres, None, default_dir=directory)
    w = init_witness(name, directory, db=db, postgres=pg, mldsa=args.mldsa)
    if args.json:
        obj = {"name": name, "vkeys": list(w.vkeys), "keys": list(w.keys), "config": w.config}
        write_stdout(_json_line({**obj, "db": w.db, "postgres": pg is not None}))
    else:
        write_stdout("".join(v + "\n" for v in w.vkeys))
    return EXIT_OK


def _cmd_vkey(args: argparse.Namespace) -> int:
    cfg = find_config(args.config)
    _, keys = read_witness_keys(key_paths(args.key, cfg), cfg.name if cfg else None)
    write_stdout("".join(k.vkey() + "\n" for k in keys))
    return EXIT_OK


def _cmd_add_log(args: argparse.Namespace) -> int:
    origin = _origin_arg(args.origin)
    vkeys = tuple(nonempty(k, "--key") for k in args.key)
    qpd = None if args.qpd is None else decimal_arg(args.qpd, "--qpd", 1)
    tiles = None if args.tiles is None else check_tiles_url(args.tiles)
    with _open(args) as state:
        state.add_log(origin, vkeys, qpd, tiles)
    n = len(set(vkeys))
    fed = "" if tiles is None else f", fed from {tiles}"
    write_stdout(f"added {quote(origin)} ({n} key{'s' if n > 1 else ''}{fed})\n")
    return EXIT_OK


def _cmd_set_tiles(args: argparse.Namespace) -> int:
    origin = _origin_arg(args.origin)
    url = None if args.url == "none" else check_tiles_url(args.url)
    with _open(args) as state:
        if state.log(origin) is None:
            raise UsageError(f"log {quote(origin)} is not configured (add it with add-log)")
        state.set_tiles(origin, url)
    write_stdout(
        f"{quote(origin)}: no tiles URL\n" if url is None else f"{quote(origin)}: fed from {url}\n"
    )
    return EXIT_OK


def _cmd_add_key(args: argparse.Namespace) -> int:
    origin = _origin_arg(args.origin)
    vkey = nonempty(args.vkey, "VKEY")
    with _open(args) as state:
        config = state.log(origin)
        if config is None:
            raise UsageError(f"log {quote(origin)} is not configured (add it with add-log)")
        if vkey in config.keys:
            write_stdout(f"{quote(origin)} already trusts that key\n")
            return EXIT_OK
        state.add_key(origin, vkey)
    write_stdout(f"key added to {quote(origin)}\n")
    return EXIT_OK


def _set_disabled(args: argparse.Namespace, disabled: bool) -> int:
    origin = _origin_arg(args.origin)
    with _open(args) as state:
        if state.log(origin) is None:
            raise UsageError(f"log {quote(origin)} is not configured")
        state.set_disabled(origin, disabled)
    write_stdout(f"{'disabled' if disabled else 'enabled'} {quote(origin)}\n")
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
                "tiles": config.tiles,
                "size": None if c is None else c.size,
                "root": None if c is None else b64encode(c.root),
                "updated_at": None if c is None else c.updated_at,
            }
            out.append(_json_line(obj))
            continue
        size = "never cosigned" if c is None else f"size {c.size}"
        when = "" if c is None else f" updated {_time(c.updated_at)}"
        qpd = "-" if config.qpd is None else str(config.qpd)
        state_text = "disabled" if config.disabled else "enabled"
        out.append(f"{quote(config.origin)} {state_text} {size}{when} qpd {qpd}\n")
        out.extend(f"  key {k}\n" for k in config.keys)
        if config.tiles is not None:
            out.append(f"  tiles {config.tiles}\n")
    write_stdout("".join(out))
    return EXIT_OK


def _cmd_pull_logs(args: argparse.Namespace) -> int:
    source = nonempty(args.source, "FILE|URL")
    timeout = wconfig.parse_seconds(args.timeout, "--timeout", positive=True)
    entries = read_log_list(source, timeout)
    with _open(args) as state:
        summary = pull_logs(state, entries, dry_run=args.dry_run, report=write_stdout)
    write_stdout(summary.text(args.dry_run))
    return EXIT_OK


def _cmd_evidence(args: argparse.Namespace) -> int:
    origin = None if args.origin is None else _origin_arg(args.origin)
    if args.show is not None:
        wanted = decimal_arg(args.show, "--show", 1)
        with _open(args) as state:
            found = find_evidence(state, wanted, origin)
        if args.out is not None:
            out = nonempty(args.out, "--out")
            try:
                paths = evidence_files(found, out)
            except OSError as err:
                raise UsageError(f"--out {out}: {err.strerror or err}") from None
            write_stdout("".join(p + "\n" for p in paths))
        elif args.json:
            write_stdout(_json_line(evidence_json(found)))
        else:
            write_stdout(found.request)
        return EXIT_OK
    if args.out is not None:
        raise UsageError("--out needs --show ID")
    limit = decimal_arg(args.limit, "--limit", 1)
    with _open(args) as state:
        items = state.evidence(origin, limit)
    if args.json:
        write_stdout("".join(json.dumps(evidence_json(e), sort_keys=True) + "\n" for e in items))
    else:
        write_stdout(
            "".join(f"{e.id} {_time(e.received_at)} {quote(e.origin)} {e.reason}\n" for e in items)
        )
    return EXIT_OK


def _cmd_export_state(args: argparse.Namespace) -> int:
    with _open(args) as state:
        data = state.export_state()
    if is_stdin(args.out):
        write_stdout(data)
    else:
        with output_file(nonempty(args.out, "--out"), ".tlog-witness-", name_path=True) as f:
            f.write(data)
    return EXIT_OK


def _cmd_import_state(args: argparse.Namespace) -> int:
    data = read_input(nonempty(args.file, "FILE"))
    # The whole file is checked before the state is even located: a refused file is the
    # error reported, whatever else is wrong.
    n = len(parse_state(data))
    import_parsed(data, *_state_of(args))
    write_stdout(f"imported {n} log{'' if n == 1 else 's'}\n")
    return EXIT_OK


def _cmd_serve(args: argparse.Namespace) -> int:
    from witness.serving import app_factory, request_logger, serve  # noqa: PLC0415 - aiohttp

    s = serve_settings(args, find_config(args.config))
    name, keys = read_witness_keys(s.keys, s.name)
    vkeys = [k.vkey() for k in keys]
    if not s.postgres:
        refuse_missing(s.db)
    logger = request_logger()
    factory = app_factory(s, name, keys, logger)
    # The state and the settings are checked here, once, before any worker starts.
    _, close = factory(None)
    close()
    if args.check:
        write_stdout("".join(f"{k} {v}\n" for k, v in check_lines(s, name, vkeys)))
        return EXIT_OK
    return serve(factory, vkeys=vkeys, logger=logger, **s.serve_options())


def _cmd_feed(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415 - feed only
    import signal  # noqa: PLC0415

    from witness.feed import run_feed  # noqa: PLC0415 - aiohttp
    from witness.server import COSIGNING_KEY, make_app  # noqa: PLC0415
    from witness.serving import request_logger  # noqa: PLC0415

    cfg = find_config(args.config)
    name, keys = read_witness_keys(
        key_paths(args.key, cfg), args.name if args.name is not None else cfg.name if cfg else None
    )
    interval = wconfig.parse_seconds(args.interval, "--interval", positive=True)
    timeout = wconfig.parse_seconds(args.timeout, "--timeout", positive=True)
    origins = tuple(_origin_arg(o) for o in args.origin or ())
    db, pg = _state_of(args)
    if not pg:
        refuse_missing(db)
    logger = request_logger()

    def report(r: FeedResult) -> None:
        write_stdout(r.json_line() if args.json else r.line())

    async def main() -> int:
        with open_existing(db, pg) as state:
            # config_ttl 0: each round reads the logs' configuration afresh.
            app = make_app(
                state,
                [cosigner(k) for k in keys],
                name=name,
                config_ttl=0.0,
                status_endpoints=False,
                logger=logger,
            )
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            return await run_feed(
                app[COSIGNING_KEY],
                once=args.once,
                interval=interval,
                timeout=timeout,
                origins=origins,
                report=report,
                stop=stop,
            )

    return asyncio.run(main())


# --- the verbs' arguments --------------------------------------------------------------------


def _state_options(
    p: argparse.ArgumentParser, *, config: bool = True, state: bool = True, command: bool = False
) -> None:
    """The options that name the state, first in every verb's usage line.

    The command's own parser takes them too (``command``), so that they may come before the
    verb (``tlog-witness --config FILE list-logs``) as well as after it. A verb's copies default
    to nothing (``argparse.SUPPRESS``): argparse copies the verb's namespace over the
    command's, so a default there would undo a value given before the verb. Given on both
    sides, the later wins. The command's copies are not listed in its help, whose epilog says
    which verbs take which (:data:`witness.cli_help.EPILOG_MAIN`).
    """
    default = None if command else argparse.SUPPRESS
    shown = (lambda text: argparse.SUPPRESS) if command else (lambda text: text)
    g = p.add_argument_group("state options")
    if config:
        g.add_argument(
            "--config",
            metavar="FILE",
            default=default,
            help=shown(f"witness.toml (env {ENV_CONFIG})"),
        )
    if state:
        where = g.add_mutually_exclusive_group()
        where.add_argument(
            "--db", metavar="PATH", default=default, help=shown(f"SQLite state file (env {ENV_DB})")
        )
        where.add_argument(
            "--postgres",
            metavar="URL",
            default=default,
            help=shown(f"PostgreSQL URL (env {ENV_POSTGRES})"),
        )


# The verbs that do not take a state option, which given before the verb would be ignored.
_NOT_TAKEN = {"init": ("config",), "vkey": ("db", "postgres")}


@dataclasses.dataclass(frozen=True)
class _WitnessCommand(Command):
    """A :class:`tlog.cli.run.Command` whose own parser takes the state options too."""

    def parser(self) -> clirun.ArgumentParser:
        p = super().parser()
        _state_options(p, command=True)
        return p


def _run_verb(args: argparse.Namespace) -> int:
    """``args.func(args)``, once the state options given before the verb fit it."""
    for name in _NOT_TAKEN.get(args.verb, ()):
        if getattr(args, name) is not None:
            raise UsageError(f"{args.verb} takes no --{name}")
    status: int = args.func(args)
    return status


def _init_args(p: argparse.ArgumentParser) -> None:
    _state_options(p, config=False)
    p.add_argument("--name", required=True, metavar="NAME", help="the witness's name")
    p.add_argument("--dir", default=".", metavar="DIR", help="where to write (default: .)")
    p.add_argument("--mldsa", action="store_true", help="also make an ML-DSA-44 key")
    p.add_argument("--json", action="store_true", help="print JSON")


def _vkey_args(p: argparse.ArgumentParser) -> None:
    _state_options(p, state=False)
    p.add_argument("--key", action="append", metavar="FILE", help="signer key file (repeatable)")


def _add_log_args(p: argparse.ArgumentParser) -> None:
    _state_options(p)
    p.add_argument("origin", metavar="ORIGIN", help="the log's checkpoint origin")
    p.add_argument(
        "--key", action="append", required=True, metavar="VKEY", help="log vkey (repeatable)"
    )
    p.add_argument("--qpd", metavar="N", help="requests per day (default: unlimited)")
    p.add_argument("--tiles", metavar="URL", help="where the log serves tlog-tiles (for feed)")


def _set_tiles_args(p: argparse.ArgumentParser) -> None:
    _state_options(p)
    p.add_argument("origin", metavar="ORIGIN", help="the log's origin")
    p.add_argument("url", metavar="URL|none", help="the log's tiles URL, or none to clear it")


def _feed_args(p: argparse.ArgumentParser) -> None:
    _state_options(p)
    p.add_argument("--once", action="store_true", help="one round, then exit")
    p.add_argument(
        "--interval",
        default=f"{DEFAULT_FEED_INTERVAL:g}",
        metavar="S",
        help=f"seconds between rounds (default {DEFAULT_FEED_INTERVAL:g})",
    )
    p.add_argument(
        "--timeout",
        default=f"{DEFAULT_FEED_TIMEOUT:g}",
        metavar="S",
        help=f"seconds for each HTTP request (default {DEFAULT_FEED_TIMEOUT:g})",
    )
    p.add_argument("--origin", action="append", metavar="ORIGIN", help="only this log (repeatable)")
    p.add_argument("--name", metavar="NAME", help="the witness's name (default: the keys')")
    p.add_argument("--key", action="append", metavar="FILE", help="signer key file (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON Lines")


def _add_key_args(p: argparse.ArgumentParser) -> None:
    _state_options(p)
    p.add_argument("origin", metavar="ORIGIN", help="the log's origin")
    p.add_argument("vkey", metavar="VKEY", help="the new key")


def _origin_args(p: argparse.ArgumentParser) -> None:
    _state_options(p)
    p.add_argument("origin", metavar="ORIGIN", help="the log's origin")


def _json_args(p: argparse.ArgumentParser) -> None:
    _state_options(p)
    p.add_argument("--json", action="store_true", help="print JSON Lines")


def _pull_args(p: argparse.ArgumentParser) -> None:
    _state_options(p)
    p.add_argument("source", metavar="FILE|URL", help="the list: a file, - or an http(s) URL")
    p.add_argument("--dry-run", action="store_true", help="print the changes, write nothing")
    p.add_argument(
        "--timeout",
        default=f"{DEFAULT_FETCH_TIMEOUT:g}",
        metavar="SECONDS",
        help=f"for a URL (default {DEFAULT_FETCH_TIMEOUT:g})",
    )


def _evidence_args(p: argparse.ArgumentParser) -> None:
    _state_options(p)
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


def _export_args(p: argparse.ArgumentParser) -> None:
    _state_options(p)
    p.add_argument("--out", metavar="FILE", help="output file (default: standard output)")


def _import_args(p: argparse.ArgumentParser) -> None:
    _state_options(p)
    p.add_argument("file", metavar="FILE", help="an export-state file, or - for stdin")


def _serve_args(p: argparse.ArgumentParser) -> None:
    _state_options(p)
    p.add_argument("--listen", metavar="HOST:PORT", help=f"default {wconfig.DEFAULT_LISTEN}")
    p.add_argument("--name", metavar="NAME", help="the witness's name (default: the keys')")
    p.add_argument("--key", action="append", metavar="FILE", help="signer key file (repeatable)")
    p.add_argument("--submission-prefix", metavar="P", help='e.g. /witness (default "")')
    p.add_argument("--monitoring-prefix", metavar="P", help='e.g. /witness (default "")')
    p.add_argument("--max-body", metavar="BYTES", help=f"default {wconfig.DEFAULT_MAX_BODY}")
    p.add_argument("--read-timeout", metavar="S", help=f"default {wconfig.DEFAULT_READ_TIMEOUT:g}")
    p.add_argument("--config-ttl", metavar="S", help=f"default {wconfig.DEFAULT_CONFIG_TTL:g}")
    p.add_argument(
        "--status-endpoints",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve / and /metrics (default: yes)",
    )
    p.add_argument(
        "--shutdown-timeout", metavar="S", help=f"default {wconfig.DEFAULT_SHUTDOWN_TIMEOUT:g}"
    )
    for key in (*wconfig.LIMIT_SECONDS, *wconfig.LIMIT_COUNTS):
        p.add_argument(
            flag(key),
            metavar="S" if key in wconfig.LIMIT_SECONDS else "N",
            help=f"default {limit_text(getattr(wconfig.DEFAULT_LIMITS, key))}",
        )
    p.add_argument(
        "--workers",
        metavar="N",
        help=f"server processes on the one state; the number of cores uses them all"
        f" (default {wconfig.DEFAULT_WORKERS})",
    )
    p.add_argument("--check", action="store_true", help="print the settings and exit")


# --- the command -----------------------------------------------------------------------------


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


def _conformance_args(p: argparse.ArgumentParser) -> None:
    """Listed for --help only: :func:`main` hands ``conformance ...`` to
    :mod:`witness.conformance`, which has its own parser (it needs no state, and tests any
    witness, not this one)."""


_CONFORMANCE = "conformance"

_EXTRAS = ("witness", "postgres")
"""The extras (:mod:`tlog.extras`) the verbs may need: ``witness`` for ``serve`` (aiohttp),
``pull-logs URL`` and ``conformance`` (requests); ``postgres`` for ``--postgres``."""

COMMAND = _WitnessCommand(
    prog=PROG,
    description="A C2SP tlog-witness: cosigns checkpoints of the logs it follows.",
    epilog=EPILOG_MAIN,
    verbs=(
        Verb(
            "init",
            "create the witness's keys, config and state",
            EPILOG_INIT,
            _cmd_init,
            _init_args,
        ),
        Verb("vkey", "print the witness's vkeys", EPILOG_VKEY, _cmd_vkey, _vkey_args),
        Verb("add-log", "follow a new log", EPILOG_ADD_LOG, _cmd_add_log, _add_log_args),
        Verb(
            "add-key", "trust one more key for a log", EPILOG_ADD_KEY, _cmd_add_key, _add_key_args
        ),
        Verb(
            "set-tiles",
            "set or clear the tiles URL a log is fed from",
            EPILOG_SET_TILES,
            _cmd_set_tiles,
            _set_tiles_args,
        ),
        Verb(
            "disable-log",
            "refuse a log's checkpoints",
            EPILOG_DISABLE,
            _cmd_disable_log,
            _origin_args,
        ),
        Verb("enable-log", "re-enable a log", EPILOG_DISABLE, _cmd_enable_log, _origin_args),
        Verb("list-logs", "list the logs followed", EPILOG_LIST, _cmd_list_logs, _json_args),
        Verb("pull-logs", "add logs from a logs/v0 list", EPILOG_PULL, _cmd_pull_logs, _pull_args),
        Verb(
            "evidence",
            "show kept split-view evidence",
            EPILOG_EVIDENCE,
            _cmd_evidence,
            _evidence_args,
        ),
        Verb(
            "export-state",
            "write the state to a file",
            EPILOG_EXPORT,
            _cmd_export_state,
            _export_args,
        ),
        Verb(
            "import-state",
            "merge an exported state",
            EPILOG_IMPORT,
            _cmd_import_state,
            _import_args,
        ),
        Verb("serve", "run the witness server", serve_epilog(), _cmd_serve, _serve_args),
        Verb("feed", "follow logs by their tiles URL", EPILOG_FEED, _cmd_feed, _feed_args),
        Verb(
            _CONFORMANCE,
            "run the black-box protocol suite against a witness URL",
            "",
            None,
            _conformance_args,
        ),
    ),
    statuses=_STATUSES,
    extras=_EXTRAS,
)
"""``tlog-witness``: each verb declared once (name, help, epilog, handler, arguments)."""

_VERBS = tuple(v for v in COMMAND.verb_names if v != _CONFORMANCE)
"""The verbs :func:`main` parses itself (``conformance`` has its own parser)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tlog-witness`` command."""
    return COMMAND.parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tlog-witness`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    The one place where exceptions become exit statuses (:data:`_STATUSES`, then the common
    rules of :func:`tlog.cli.run.run`), each with one line on standard error:
    CorruptStateError and VerificationError → 1; MalformedError, UsageError, OSError,
    UnicodeDecodeError and argparse errors → 2; BackendError, CommitUnknownError, other state
    errors and FetchError → 4; KeyboardInterrupt → 130; a verb that needs an extra that is not
    installed (:data:`_EXTRAS`) → 2. ``--help`` exits 0 through SystemExit, as argparse does.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == [_CONFORMANCE]:
        try:
            from witness.conformance import conformance_main  # noqa: PLC0415 - a separate tool
        except ModuleNotFoundError as e:  # requests: the witness extra
            return clirun.report_missing_extra(PROG, _CONFORMANCE, e, _EXTRAS)
        return conformance_main(args_list[1:])
    return clirun.run(PROG, _VERBS, COMMAND.parser, args_list, _STATUSES, _run_verb, extras=_EXTRAS)


if __name__ == "__main__":
    sys.exit(main())
