"""Where a witness's pieces are found: its config file, state and keys; ``serve``'s settings.

Every ``tlog-witness`` verb finds what it works on the same way, and an embedder finds it the
same way from Python:

* the **config file** (:func:`find_config`): the path given, else the environment variable
  ``TLOG_WITNESS_CONFIG``, else none;
* the **state** (:func:`locate_state`): the SQLite path or PostgreSQL URL given, else the
  environment (``TLOG_WITNESS_DB``, ``TLOG_WITNESS_POSTGRES``: setting both is an error), else
  the file's ``db``/``postgres``, else ``witness.db`` in the file's directory (or in the current
  directory without a file). :func:`open_existing` then refuses a SQLite path with no file
  rather than create an empty state there;
* the **keys** (:func:`key_paths`, :func:`read_witness_keys`): the key files given, else the
  file's ``keys``, else ``witness.key`` (and ``witness-mldsa.key`` when it exists) in the file's
  directory; all of type 0x04 or 0x06 and of one name;
* the settings of **serve** (:func:`serve_settings`, :class:`ServeSettings`): for each setting
  the flag, then (the state only) the environment, then the file, then the default of
  :mod:`witness.config`.

Flag texts are parsed as the command line gives them, and error messages name the flag
(``--listen``, ``--max-body``), so that the command's messages are those of this module.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tlog.cli.files import read_key_file
from tlog.cli.run import utf8_arg
from tlog.cosignature import (
    TYPE_COSIGNATURE_V1,
    TYPE_SUBTREE_V1,
    CosignatureV1Signer,
    SubtreeV1Signer,
)
from tlog.errors import UsageError
from tlog.keys import TYPE_NAMES, SignerKey
from tlog.note import check_key_name
from witness.config import (
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
    FileConfig,
    Limits,
    check_prefix,
    format_listen,
    load_config,
    parse_listen,
    parse_max_body,
    parse_seconds,
    parse_workers,
)
from witness.open import open_state
from witness.state import WitnessState

__all__ = [
    "ENV_CONFIG",
    "ENV_DB",
    "ENV_POSTGRES",
    "PROG",
    "ServeSettings",
    "check_lines",
    "cosigner",
    "find_config",
    "flag",
    "key_paths",
    "limit_text",
    "locate_state",
    "nonempty",
    "open_existing",
    "read_witness_key",
    "read_witness_keys",
    "refuse_missing",
    "serve_settings",
]

ENV_DB = "TLOG_WITNESS_DB"
ENV_POSTGRES = "TLOG_WITNESS_POSTGRES"
ENV_CONFIG = "TLOG_WITNESS_CONFIG"

PROG = "tlog-witness"
"""The command, as messages that tell the operator what to run name it."""


def nonempty(text: str, what: str) -> str:
    """``text``, which must be valid UTF-8 and not empty (UsageError naming ``what``)."""
    if not utf8_arg(text, what):
        raise UsageError(f"{what} is empty")
    return text


def find_config(path: str | None) -> FileConfig | None:
    """The witness.toml at ``path``, else the one ``TLOG_WITNESS_CONFIG`` names, else None."""
    if path is None:
        path = os.environ.get(ENV_CONFIG) or None
    if path is None:
        return None
    return load_config(nonempty(path, "--config"))


def _base_dir(cfg: FileConfig | None) -> str:
    return "." if cfg is None else cfg.base_dir


def locate_state(
    db: str | None,
    postgres: str | None,
    cfg: FileConfig | None,
    default_dir: str | None = None,
) -> tuple[str | None, str | None]:
    """``(db, postgres)`` of the state: exactly one is set (see the module docstring).

    ``db`` and ``postgres`` are the flags (at most one given); ``default_dir`` replaces the
    file's directory for the default ``witness.db``.
    """
    if db is not None:
        return nonempty(db, "--db"), None
    if postgres is not None:
        return None, nonempty(postgres, "--postgres")
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


def refuse_missing(db: str | None) -> None:
    """Refuse a SQLite path with no file: opening it would create an empty state there."""
    if db is not None and not os.path.exists(db):
        # Most often a verb run outside the witness's directory: say how to name it.
        raise UsageError(
            f"no witness state at {db}: name the witness with --config FILE (or {ENV_CONFIG}),"
            f" or create one with '{PROG} init'"
        )


@contextlib.contextmanager
def open_existing(db: str | None, postgres: str | None) -> Iterator[WitnessState]:
    """The existing state at ``db`` or ``postgres`` (one set), closed afterwards."""
    refuse_missing(db)
    state = open_state(db=db, postgres=postgres, create=False)
    try:
        yield state
    finally:
        state.close()


def key_paths(keys: Sequence[str] | None, cfg: FileConfig | None) -> list[str]:
    """The witness's key files: ``keys`` (the flags), else the file's ``keys``, else the
    defaults."""
    if keys:
        return [nonempty(p, "--key") for p in keys]
    if cfg is not None and cfg.keys is not None:
        return list(cfg.keys)
    base = _base_dir(cfg)
    paths = [os.path.join(base, KEY_FILE)]
    if cfg is None and not os.path.exists(paths[0]):
        # No flag, no config: most often a verb run outside the witness's directory.
        raise UsageError(
            f"no witness key at {paths[0]}: name the witness with --config FILE (or"
            f" {ENV_CONFIG}), or pass --key FILE"
        )
    mldsa = os.path.join(base, MLDSA_KEY_FILE)
    if os.path.exists(mldsa):
        paths.append(mldsa)
    return paths


def read_witness_key(path: str) -> SignerKey:
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


def read_witness_keys(paths: Sequence[str], name: str | None) -> tuple[str, list[SignerKey]]:
    """Read the key files; all must carry one name (``name`` when given). Returns the name.

    Requires: at least one path.
    """
    keys = [read_witness_key(p) for p in paths]
    want = name if name is not None else keys[0].name
    for path, key in zip(paths, keys, strict=True):
        if key.name != want:
            what = "the witness is named" if name is not None else f"{paths[0]} is named"
            raise UsageError(f"key file {path} is named {key.name!r}, {what} {want!r}")
    return want, keys


def cosigner(key: SignerKey) -> CosignatureV1Signer | SubtreeV1Signer:
    """The signer of a witness key (type 0x04 or 0x06, as :func:`read_witness_key` checks)."""
    if key.key_type == TYPE_COSIGNATURE_V1:
        return CosignatureV1Signer(key.name, key.secret)
    return SubtreeV1Signer(key.name, key.secret)


# --- serve ---------------------------------------------------------------------------------


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

    def app_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`witness.server.make_app` these settings give."""
        return {k: getattr(self, k) for k in _APP_OPTIONS}

    def serve_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`witness.serving.serve` these settings give."""
        return {k: getattr(self, k) for k in _SERVE_OPTIONS}


_APP_OPTIONS = (
    # One line: each name is a keyword of make_app and a field of ServeSettings.
    "submission_prefix", "monitoring_prefix", "max_body", "read_timeout", "config_ttl",
    "status_endpoints", "limits",
)  # fmt: skip
_SERVE_OPTIONS = ("host", "port", "workers", "shutdown_timeout")


def flag(setting: str) -> str:
    """The command-line flag of a setting: ``max_body`` is ``--max-body``."""
    return "--" + setting.replace("_", "-")


def limit_text(value: float) -> str:
    """A connection limit as ``--check`` and ``--help`` show it."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _parse_limit(key: str, text: str) -> float | int:
    """A connection limit's flag value: seconds (> 0) or a count (>= 1)."""
    if key in LIMIT_SECONDS:
        return parse_seconds(text, flag(key), positive=True)
    return parse_max_body(text, flag(key))


def _name_arg(text: str) -> str:
    check_key_name(utf8_arg(text, "--name"))
    return text


def _seconds(what: str, *, positive: bool) -> Callable[[str], float]:
    return functools.partial(parse_seconds, what=what, positive=positive)


def _prefix(what: str) -> Callable[[str], str]:
    return lambda t: check_prefix(utf8_arg(t, "x"), what)


_FLAG_PARSERS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    # setting: (how its flag's text is parsed, its default)
    "submission_prefix": (_prefix("--submission-prefix"), ""),
    "monitoring_prefix": (_prefix("--monitoring-prefix"), ""),
    "max_body": (lambda t: parse_max_body(t, "--max-body"), DEFAULT_MAX_BODY),
    "read_timeout": (_seconds("--read-timeout", positive=True), DEFAULT_READ_TIMEOUT),
    "config_ttl": (_seconds("--config-ttl", positive=False), DEFAULT_CONFIG_TTL),
    "status_endpoints": (bool, True),
    "shutdown_timeout": (_seconds("--shutdown-timeout", positive=False), DEFAULT_SHUTDOWN_TIMEOUT),
    "workers": (lambda t: parse_workers(t, "--workers"), DEFAULT_WORKERS),
}


def serve_settings(flags: Any, cfg: FileConfig | None) -> ServeSettings:
    """Resolve ``serve``'s settings from its flags and the config file ``cfg``.

    ``flags`` has one attribute per setting (``args`` of ``tlog-witness serve``: ``listen``,
    ``name``, ``db``, ``postgres``, ``key``, ``max_body``, ..., one per connection limit), each
    the flag's text or None when not given (``status_endpoints``: a bool or None; ``key``: a
    list or None); a :class:`Mapping` of those names works too.
    """
    get: Callable[[str], Any] = (
        flags.get if isinstance(flags, Mapping) else functools.partial(getattr, flags)
    )

    def pick(flag_value: Any, parse: Callable[[Any], Any], key: str, default: Any) -> Any:
        if flag_value is not None:
            return parse(flag_value)
        from_file = None if cfg is None else getattr(cfg, key)
        return default if from_file is None else from_file

    host, port = pick(
        get("listen"),
        lambda t: parse_listen(utf8_arg(t, "--listen"), "--listen"),
        "listen",
        parse_listen(DEFAULT_LISTEN),
    )
    db, pg = locate_state(get("db"), get("postgres"), cfg)
    # In the order the settings are listed, so that of two bad flags the first is reported.
    name = pick(get("name"), _name_arg, "name", None)
    keys = tuple(key_paths(get("key"), cfg))
    picked = {key: pick(get(key), parse, key, d) for key, (parse, d) in _FLAG_PARSERS.items()}
    limits = Limits(
        **{
            key: pick(
                get(key),
                functools.partial(_parse_limit, key),
                key,
                getattr(DEFAULT_LIMITS, key),
            )
            for key in (*LIMIT_SECONDS, *LIMIT_COUNTS)
        }
    )
    return ServeSettings(name, host, port, db, pg, keys, limits=limits, **picked)


def check_lines(s: ServeSettings, name: str, vkeys: Sequence[str]) -> list[tuple[str, str]]:
    """The ``setting value`` pairs ``serve --check`` prints, in its order."""
    return [
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
        *((key, limit_text(getattr(s.limits, key))) for key in (*LIMIT_SECONDS, *LIMIT_COUNTS)),
        *(("vkey", v) for v in vkeys),
    ]
