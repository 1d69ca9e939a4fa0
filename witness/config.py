"""The witness's configuration inputs: the ``witness.toml`` file of ``tlog-witness serve`` and
the transparency-dev/witness-network ``logs/v0`` log list read by ``tlog-witness pull-logs``.

Both are parsed strictly: anything the format does not allow raises
:class:`~tlog.errors.MalformedError` naming the file and the line (or the setting).

**witness.toml** — UTF-8 TOML (read with :mod:`tomllib`), one flat table: no sub-tables, no
setting other than those below, each of its own TOML type (a boolean is not a number, an
integer is not a string). Every setting is optional. ``tlog-witness init`` writes a starter
file listing all of them with comments (:func:`starter_config`).

=====================  =========  ===========================================================
setting                 type       meaning (default)
=====================  =========  ===========================================================
``name``               string     the witness's name: the key name of its cosignature keys
                                   and of the signature lines it returns (default: the name
                                   of the key files, which must all carry the same name)
``listen``             string     ``HOST:PORT`` to listen on; an IPv6 host in brackets
                                   (``[::1]:7380``); port 0 takes any free port
                                   (default ``127.0.0.1:7380``: local only)
``db``                 string     the SQLite state file (default ``witness.db``)
``postgres``           string     instead of ``db``: a PostgreSQL libpq URL or connection
                                   string (``postgresql://user@host:5432/db``)
``keys``               array of   the witness's signer key files, Go ``PRIVATE+KEY+…`` text of
                       strings    type 0x04 (Ed25519 cosignature/v1) or 0x06 (ML-DSA-44
                                   subtree/v1, which also enables sign-subtree) (default
                                   ``witness.key``, plus ``witness-mldsa.key`` if it exists)
``submission_prefix``  string     URL path before ``/add-checkpoint`` and ``/sign-subtree``:
                                   ``""`` or ``/path`` without a trailing slash (default ``""``)
``monitoring_prefix``  string     URL path before ``/<hex SHA-256(origin)>/checkpoint``, same
                                   form (default ``""``)
``max_body``           integer    largest request body accepted, bytes, >= 1; larger: 413
                                   (default 1051475: a maximal note plus 63 proof lines)
``read_timeout``       number     seconds a client has to send the whole body, > 0; slower:
                                   408 (default 10)
``config_ttl``         number     seconds a log's configuration (keys, qpd, disabled) is cached
                                   between reads of the state, and between reloads of the log
                                   list when the monitoring endpoint meets an unknown origin
                                   hash, >= 0 (default 1; 0 reads it on every request)
``status_endpoints``   boolean    serve the HTML status page ``/``, the evidence ``/evidence``
                                   and Prometheus ``/metrics`` (default true)
``shutdown_timeout``   number     seconds requests in flight get to finish after SIGTERM or
                                   SIGINT, >= 0 (default 5)
``workers``            integer    server processes on the one state, 1..256: set it to the
                                   number of cores to use them all (default 1; see
                                   :mod:`witness.serving`)
``idle_timeout``       number     seconds a connection may wait with no request in progress
                                   and no byte of the next one, > 0; then it is closed
                                   (default 5)
``header_timeout``     number     seconds from a request's first byte to the end of its
                                   headers, > 0; slower: 408 and closed (default 10)
``request_timeout``    number     seconds from the end of a request's headers until its
                                   response is handed over, > 0; then closed (default 60)
``max_header_bytes``   integer    bytes of a request's header block, >= 1; more: 431 and
                                   closed (default 16384)
``max_connections``    integer    open connections per server process, >= 1; at the cap the
                                   longest-idle connection is closed for a new one, and 503
                                   only when all have a request in progress (default 1024)
``max_connections_per_address``
                       integer    open connections per client address (IPv6: per /64) per
                                   process, >= 1; more: 429 (default 128)
``max_body_memory``    integer    request body bytes read at once per process, >= 1; more
                                   wait, within ``read_timeout`` (default 67108864: 64 MiB)
=====================  =========  ===========================================================

The last seven are the connection limits of :mod:`witness.connections`.

Relative paths in the file (``db``, ``keys``) are relative to the file's own directory, so that
``tlog-witness serve --config /etc/witness/witness.toml`` works from any directory; relative
paths on the command line are relative to the current directory. Without a file, defaults are
relative to the current directory. Numbers are finite; ``db`` and ``postgres`` exclude each
other. Precedence (:mod:`witness.settings`): command-line flag, then (for the state only) the
environment variables ``TLOG_WITNESS_DB`` / ``TLOG_WITNESS_POSTGRES``, then the file, then the
default.

**logs/v0** — the transparency-dev/witness-network log list that ``tlog-witness pull-logs``
reads — is parsed by :mod:`witness.loglist` (:func:`parse_log_list`, :class:`ListedLog`, both
re-exported here).
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass
from typing import Any

from tlog.encoding import MAX_INT63, parse_decimal
from tlog.errors import MalformedError, UsageError
from tlog.note import check_key_name
from witness.loglist import LOG_LIST_HEADER, ListedLog, parse_log_list


@dataclass(frozen=True)
class Limits:
    """The connection limits of one server process (:mod:`witness.connections` enforces them)."""

    idle_timeout: float = 5.0
    header_timeout: float = 10.0
    request_timeout: float = 60.0
    max_header_bytes: int = 16384
    max_connections: int = 1024
    max_connections_per_address: int = 128
    max_body_memory: int = 64 << 20

    def check(self) -> Limits:
        """Self, if every limit is usable (UsageError otherwise)."""
        for name in ("idle_timeout", "header_timeout", "request_timeout"):
            if not getattr(self, name) > 0:
                raise UsageError(f"{name} must be > 0")
        for name in (
            "max_header_bytes",
            "max_connections",
            "max_connections_per_address",
            "max_body_memory",
        ):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1")
        return self


CONFIG_FILE = "witness.toml"
"""The file name ``tlog-witness init`` writes."""

KEY_FILE = "witness.key"
"""The Ed25519 cosignature/v1 key file ``init`` writes (and ``serve`` reads by default)."""

MLDSA_KEY_FILE = "witness-mldsa.key"
"""The ML-DSA-44 subtree/v1 key file ``init --mldsa`` writes."""

DB_FILE = "witness.db"
"""The default SQLite state file."""

DEFAULT_FEED_INTERVAL = 60.0
"""Seconds between two rounds of ``tlog-witness feed`` (:mod:`witness.feed`)."""
DEFAULT_FEED_TIMEOUT = 30.0
"""Seconds for each HTTP request of a ``tlog-witness feed`` round."""

DEFAULT_LISTEN = "127.0.0.1:7380"
DEFAULT_MAX_BODY = 1051475
"""Equal to :data:`tlog.witnessproto.MAX_REQUEST_SIZE` (a test checks it)."""
DEFAULT_READ_TIMEOUT = 10.0
"""Equal to :data:`witness.server.DEFAULT_READ_TIMEOUT` (a test checks it)."""
DEFAULT_CONFIG_TTL = 1.0
DEFAULT_SHUTDOWN_TIMEOUT = 5.0
DEFAULT_WORKERS = 1
MAX_WORKERS = 256
DEFAULT_LIMITS = Limits()
"""The connection limits' defaults (:class:`witness.connections.Limits`)."""
LIMIT_SECONDS = ("idle_timeout", "header_timeout", "request_timeout")
"""Connection limits that are numbers of seconds (> 0); the other limits are integers >= 1."""
LIMIT_COUNTS = (
    "max_header_bytes",
    "max_connections",
    "max_connections_per_address",
    "max_body_memory",
)

MAX_CONFIG_SIZE = 1 << 20
"""Largest configuration file read."""


@dataclass(frozen=True)
class Setting:
    """One setting of witness.toml: its name, TOML type, default and meaning (for --help)."""

    name: str
    kind: str
    default: str
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting("name", "string", "the key files' name", "the witness's name (its keys' name)"),
    Setting("listen", "string", DEFAULT_LISTEN, "HOST:PORT, [IPv6]:PORT; port 0: any free port"),
    Setting("db", "string", DB_FILE, "SQLite state file"),
    Setting("postgres", "string", "(unset)", "PostgreSQL URL, instead of db"),
    Setting(
        "keys",
        "array of strings",
        f"{KEY_FILE} [+ {MLDSA_KEY_FILE}]",
        "signer key files, type 0x04 (cosignature/v1) or 0x06 (ML-DSA-44)",
    ),
    Setting("submission_prefix", "string", '""', "path before /add-checkpoint, /sign-subtree"),
    Setting("monitoring_prefix", "string", '""', "path before /<hex sha256(origin)>/checkpoint"),
    Setting("max_body", "integer", str(DEFAULT_MAX_BODY), "largest request body, bytes (413)"),
    Setting("read_timeout", "number", "10", "seconds to receive a request body (408)"),
    Setting("config_ttl", "number", "1", "seconds a log's configuration is cached"),
    Setting("status_endpoints", "boolean", "true", "serve / (HTML status), /evidence, /metrics"),
    Setting("shutdown_timeout", "number", "5", "seconds for requests in flight at SIGTERM"),
    Setting("workers", "integer", "1", "server processes (set to the number of cores)"),
    Setting("idle_timeout", "number", "5", "seconds a connection may idle (then closed)"),
    Setting("header_timeout", "number", "10", "seconds to receive request headers (408)"),
    Setting("request_timeout", "number", "60", "seconds from headers to response (closed)"),
    Setting("max_header_bytes", "integer", "16384", "largest request header block (431)"),
    Setting("max_connections", "integer", "1024", "connections per process (idle evicted)"),
    Setting("max_connections_per_address", "integer", "128", "per client address (429)"),
    Setting("max_body_memory", "integer", "67108864", "body bytes read at once (others wait)"),
)
"""Every setting of witness.toml, in the order the starter file lists them."""

_NAMES = tuple(s.name for s in SETTINGS)


@dataclass(frozen=True)
class FileConfig:
    """The settings a witness.toml file sets (None: not set), paths already resolved against
    the file's directory (``base_dir``)."""

    path: str
    base_dir: str
    name: str | None = None
    listen: tuple[str, int] | None = None
    db: str | None = None
    postgres: str | None = None
    keys: tuple[str, ...] | None = None
    submission_prefix: str | None = None
    monitoring_prefix: str | None = None
    max_body: int | None = None
    read_timeout: float | None = None
    config_ttl: float | None = None
    status_endpoints: bool | None = None
    shutdown_timeout: float | None = None
    workers: int | None = None
    idle_timeout: float | None = None
    header_timeout: float | None = None
    request_timeout: float | None = None
    max_header_bytes: int | None = None
    max_connections: int | None = None
    max_connections_per_address: int | None = None
    max_body_memory: int | None = None


# --- values shared with the command line -----------------------------------------------------

_PREFIX = re.compile(r"(?:/[^/\s]+)*")
_SECONDS = re.compile(r"(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")


def parse_listen(text: str, what: str = "listen address") -> tuple[str, int]:
    """Parse ``HOST:PORT`` (IPv6: ``[HOST]:PORT``) into (host, port); port 0..65535, canonical
    decimal; the host non-empty without white space."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise MalformedError(f"{what} {text!r} is not HOST:PORT")
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise MalformedError(f"{what} {text!r}: an IPv6 host is written [HOST]")
        host = host[1:-1]
    elif ":" in host:
        raise MalformedError(f"{what} {text!r}: write an IPv6 host in brackets, [HOST]:PORT")
    if not host or any(c.isspace() or c < " " for c in host) or "[" in host or "]" in host:
        raise MalformedError(f"{what} {text!r} has no usable host")
    port = parse_decimal(port_text, f"{what} port", 65535)
    return host, port


def format_listen(host: str, port: int) -> str:
    """The ``HOST:PORT`` text of an address (IPv6 hosts in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_prefix(prefix: str, what: str) -> str:
    """A URL path prefix: ``""`` or ``/seg[/seg…]`` without a trailing slash, empty segment or
    white space (MalformedError otherwise)."""
    if not _PREFIX.fullmatch(prefix) or any(c < " " or c == "\x7f" for c in prefix):
        raise MalformedError(f"{what} {prefix!r} must be empty or /path without a trailing slash")
    return prefix


def parse_seconds(text: str, what: str, *, positive: bool) -> float:
    """A duration from the command line: canonical decimal with an optional fraction
    (``10``, ``2.5``); > 0 when ``positive``, else >= 0."""
    if not _SECONDS.fullmatch(text) or len(text) > 20:
        raise MalformedError(f"{what} {text!r} is not a number of seconds such as 10 or 2.5")
    return _check_seconds(float(text), what, positive=positive)


def _check_seconds(value: float, what: str, *, positive: bool) -> float:
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise MalformedError(f"{what} must be a finite number of seconds {bound}")
    return value


def parse_workers(text: str, what: str = "workers") -> int:
    """A number of server processes from the command line: canonical decimal 1..256."""
    n = parse_decimal(text, what)
    if not 1 <= n <= MAX_WORKERS:
        raise MalformedError(f"{what} must be from 1 to {MAX_WORKERS}")
    return n


def parse_max_body(text: str, what: str = "max_body") -> int:
    """A body cap from the command line: canonical decimal >= 1."""
    n = parse_decimal(text, what)
    if n < 1:
        raise MalformedError(f"{what} must be at least 1")
    return n


# --- witness.toml --------------------------------------------------------------------------


def _resolve(base_dir: str, path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(base_dir, path)


def _string(where: str, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise MalformedError(f"{where}: {key} must be a string, not {_toml_type(value)}")
    return value


def _path(where: str, key: str, value: object) -> str:
    text = _string(where, key, value)
    if not text or "\x00" in text:
        raise MalformedError(f"{where}: {key} must be a non-empty path")
    return text


def _number(where: str, key: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedError(f"{where}: {key} must be a number, not {_toml_type(value)}")
    try:
        return _check_seconds(float(value), f"{where}: {key}", positive=positive)
    except OverflowError:
        raise MalformedError(f"{where}: {key} is too large") from None


def _toml_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"  # dates and times


def parse_config(data: bytes, *, where: str, base_dir: str) -> FileConfig:
    """Parse a witness.toml file's bytes (see the module docstring); ``where`` names it in
    messages, ``base_dir`` is the directory relative paths are resolved against."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError(f"{where} is not valid UTF-8 (byte {e.start})") from None
    try:
        table: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise MalformedError(f"{where} is not valid TOML: {e}") from None
    unknown = sorted(set(table) - set(_NAMES))
    if unknown:
        raise MalformedError(
            f"{where}: unknown setting {unknown[0]!r} (known: {', '.join(_NAMES)})"
        )
    values: dict[str, Any] = {}
    if "name" in table:
        name = _string(where, "name", table["name"])
        try:
            check_key_name(name)
        except MalformedError as e:
            raise MalformedError(f"{where}: name: {e}") from None
        values["name"] = name
    if "listen" in table:
        values["listen"] = parse_listen(
            _string(where, "listen", table["listen"]), f"{where}: listen"
        )
    if "db" in table and "postgres" in table:
        raise MalformedError(f"{where}: set db or postgres, not both")
    if "db" in table:
        values["db"] = _resolve(base_dir, _path(where, "db", table["db"]))
    if "postgres" in table:
        pg = _string(where, "postgres", table["postgres"])
        if not pg:
            raise MalformedError(f"{where}: postgres is empty")
        values["postgres"] = pg
    if "keys" in table:
        keys = table["keys"]
        if not isinstance(keys, list):
            raise MalformedError(f"{where}: keys must be an array of paths, not {_toml_type(keys)}")
        if not keys:
            raise MalformedError(f"{where}: keys is empty (leave it out for the default)")
        values["keys"] = tuple(
            _resolve(base_dir, _path(where, f"keys[{i}]", k)) for i, k in enumerate(keys)
        )
    for key in ("submission_prefix", "monitoring_prefix"):
        if key in table:
            values[key] = check_prefix(_string(where, key, table[key]), f"{where}: {key}")
    for key in ("max_body", *LIMIT_COUNTS):
        if key in table:
            n = table[key]
            if isinstance(n, bool) or not isinstance(n, int):
                raise MalformedError(f"{where}: {key} must be an integer, not {_toml_type(n)}")
            if not 1 <= n <= MAX_INT63:
                raise MalformedError(f"{where}: {key} must be at least 1")
            values[key] = n
    for key in ("read_timeout", *LIMIT_SECONDS):
        if key in table:
            values[key] = _number(where, key, table[key], positive=True)
    for key in ("config_ttl", "shutdown_timeout"):
        if key in table:
            values[key] = _number(where, key, table[key], positive=False)
    if "workers" in table:
        n = table["workers"]
        if isinstance(n, bool) or not isinstance(n, int):
            raise MalformedError(f"{where}: workers must be an integer, not {_toml_type(n)}")
        if not 1 <= n <= MAX_WORKERS:
            raise MalformedError(f"{where}: workers must be from 1 to {MAX_WORKERS}")
        values["workers"] = n
    if "status_endpoints" in table:
        flag = table["status_endpoints"]
        if not isinstance(flag, bool):
            raise MalformedError(
                f"{where}: status_endpoints must be a boolean, not {_toml_type(flag)}"
            )
        values["status_endpoints"] = flag
    return FileConfig(path=where, base_dir=base_dir, **values)


def load_config(path: str) -> FileConfig:
    """Read and parse a witness.toml file (OSError when it cannot be read)."""
    with open(path, "rb") as f:
        data = f.read(MAX_CONFIG_SIZE + 1)
    if len(data) > MAX_CONFIG_SIZE:
        raise MalformedError(f"{path} is larger than {MAX_CONFIG_SIZE} bytes")
    return parse_config(data, where=path, base_dir=os.path.dirname(os.path.abspath(path)))


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string: quotes, backslashes and control characters escaped."""
    out = ['"']
    for c in text:
        if c in ('"', "\\"):
            out.append("\\" + c)
        elif c < " " or c == "\x7f":
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


_STARTER_SERVER = f"""\
# URL path prefixes: "" or "/path" without a trailing slash. Submissions go to
# <submission_prefix>/add-checkpoint (and /sign-subtree); monitors read
# <monitoring_prefix>/<hex SHA-256 of the origin>/checkpoint.
submission_prefix = ""
monitoring_prefix = ""

# Largest request body in bytes (larger: 413). The default fits a maximal signed note
# (100 ML-DSA-44 signature lines) plus 63 proof lines.
max_body = {DEFAULT_MAX_BODY}

# Seconds a client has to send the whole request body (slower: 408).
read_timeout = {DEFAULT_READ_TIMEOUT:g}

# Seconds a log's configuration is cached between reads of the state: add-key,
# disable-log, enable-log and pull-logs take effect within this time (0: every request
# reads it). Also the least time between reloads of the log list when the monitoring
# endpoint is asked for an unknown origin hash.
config_ttl = {DEFAULT_CONFIG_TTL:g}

# Serve the HTML status page (/), the evidence (/evidence) and Prometheus metrics (/metrics).
status_endpoints = true

# Seconds requests in flight get to finish after SIGTERM or SIGINT.
shutdown_timeout = {DEFAULT_SHUTDOWN_TIMEOUT:g}

# Server processes, all on the one state (each log's stored checkpoint changes only by a
# compare-and-swap, so they never disagree). One Python process uses one core: set this to
# the number of cores to use them all.
workers = {DEFAULT_WORKERS}

# Connection limits, per server process (the operator guide's "Limits" says what a client
# sees at each). A connection with no request in progress is closed after idle_timeout
# seconds; a request's headers must arrive within header_timeout seconds of its first byte
# (408) and fit in max_header_bytes (431); its response must be ready request_timeout
# seconds after its headers.
idle_timeout = {DEFAULT_LIMITS.idle_timeout:g}
header_timeout = {DEFAULT_LIMITS.header_timeout:g}
request_timeout = {DEFAULT_LIMITS.request_timeout:g}
max_header_bytes = {DEFAULT_LIMITS.max_header_bytes}
# At max_connections, the connection idle the longest is closed to admit a new one; only
# when every connection has a request in progress is a new one refused (503). One client
# address (an IPv6 /64) may hold max_connections_per_address (more: 429). Give the service
# a descriptor limit (systemd LimitNOFILE) of at least max_connections + 256.
max_connections = {DEFAULT_LIMITS.max_connections}
max_connections_per_address = {DEFAULT_LIMITS.max_connections_per_address}
# Request body bytes read at once; more requests wait (within read_timeout).
max_body_memory = {DEFAULT_LIMITS.max_body_memory}
"""
"""The part of :func:`starter_config` that is the same for every witness: the server's
settings at their defaults."""


def starter_config(
    name: str, *, keys: tuple[str, ...], db: str | None = None, postgres: str | None = None
) -> str:
    """The witness.toml ``tlog-witness init`` writes: every setting, commented.

    ``keys`` and ``db`` are written as given (relative ones are relative to the file's
    directory). Requires: exactly one of ``db``/``postgres``, at least one key, a valid name.
    """
    if (db is None) == (postgres is None):
        raise UsageError("a starter config names exactly one of db or postgres")
    if not keys:
        raise UsageError("a starter config names at least one key file")
    check_key_name(name)
    q = toml_string
    key_list = ", ".join(q(k) for k in keys)
    state = (
        f'db = {q(db)}\n# postgres = "postgresql://witness@localhost:5432/witness"\n'
        if db is not None
        else f"# db = {q(DB_FILE)}\npostgres = {q(postgres or '')}\n"
    )
    return (
        f"""\
# tlog-witness configuration (TOML). Every setting is optional; command-line flags of
# 'tlog-witness serve' override it. Relative paths are relative to this file's directory.
# See 'tlog-witness serve --help' for every setting.

# The witness's name: the key name of its cosignature keys and of the signature lines it
# returns. Log operators configure it together with the vkeys that 'tlog-witness vkey' prints.
name = {q(name)}

# Where to listen: HOST:PORT, an IPv6 host in brackets ([::1]:7380); port 0 takes any free
# port. 127.0.0.1 serves this machine only; use 0.0.0.0 (or a reverse proxy) to serve others.
listen = {q(DEFAULT_LISTEN)}

# The state: the logs this witness follows, the latest checkpoint it cosigned for each, and
# evidence of split views. A SQLite file (db), or a PostgreSQL URL (postgres) for a witness
# run as several processes. Exactly one of the two.
{state}
# The witness's signer keys (Go note PRIVATE+KEY+... files, mode 0600): an Ed25519
# cosignature/v1 key (type 0x04) and/or an ML-DSA-44 subtree/v1 key (type 0x06, which also
# enables sign-subtree). All carry the witness's name.
keys = [{key_list}]

"""
        + _STARTER_SERVER
    )


__all__ = [
    "CONFIG_FILE",
    "DB_FILE",
    "DEFAULT_CONFIG_TTL",
    "DEFAULT_LISTEN",
    "DEFAULT_MAX_BODY",
    "DEFAULT_READ_TIMEOUT",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "DEFAULT_WORKERS",
    "KEY_FILE",
    "LOG_LIST_HEADER",
    "MAX_WORKERS",
    "MLDSA_KEY_FILE",
    "SETTINGS",
    "FileConfig",
    "ListedLog",
    "Setting",
    "check_prefix",
    "format_listen",
    "load_config",
    "parse_config",
    "parse_listen",
    "parse_log_list",
    "parse_max_body",
    "parse_seconds",
    "parse_workers",
    "starter_config",
    "toml_string",
]
