"""The C2SP tlog-witness: its state, its client, its server, and the operator's tasks.

A witness cosigns the checkpoints of the logs it follows, never one that contradicts what it
cosigned before (c2sp.org/tlog-witness). Every name below is importable from ``witness``
itself; the module after each group holds it and documents it. Importing ``witness`` loads
nothing but this map: a name's module is imported on first use, so the client never loads the
server's web framework, and the server never loads ``requests``.

**Open a witness state** (:mod:`witness.open`, :mod:`witness.state`)::

    state = witness.open_state(db="witness.db")        # or postgres="postgresql://..."
    state.add_log("example.com/log", ("example.com/log+0123abcd+AQ...",), qpd=86400)
    state.logs(); state.latest(origin); state.evidence(origin, 10); state.export_state()

``open_state`` → :class:`WitnessState` (the abstract state: logs, the latest cosigned
checkpoint per log, evidence of split views, export and import); its records are
:class:`LogConfig`, :class:`Cosigned` and :class:`Evidence`.

**Administer it** (:mod:`witness.admin`, :mod:`witness.pull`, :mod:`witness.settings`):
:func:`init_witness` (keys, witness.toml and state, as ``tlog-witness init``),
:func:`import_state` (merge an export), :func:`read_log_list` and :func:`pull_logs` (follow the
logs of a logs/v0 list), :func:`find_evidence`, :func:`evidence_json`, :func:`evidence_files`
(a split view's parts for a third party), :func:`find_config`, :func:`locate_state`,
:func:`open_existing`, :func:`key_paths`, :func:`read_witness_keys`, :func:`cosigner` (find the
config file, the state and the keys as every ``tlog-witness`` verb does).

**The client** (:mod:`witness.client`, :mod:`witness.gathering`, :mod:`witness.responses`): a log
gets its checkpoints cosigned with :class:`WitnessClient` (one witness:
:meth:`~WitnessClient.submit` recovers from 409s, :meth:`~WitnessClient.add_checkpoint` is one
request, :meth:`~WitnessClient.get_checkpoint` reads the monitoring endpoint) or
:func:`gather` (several witnesses in parallel under a policy's quorum; a
:class:`GatherResult` of :class:`WitnessOutcome`); :func:`verify_cosignature_response` and
:func:`merge_cosignatures` are the pure checks underneath.

**Serve** (:mod:`witness.server`, :mod:`witness.serving`, :mod:`witness.settings`):
:func:`make_app` is the aiohttp application on a state and the witness's signers;
:func:`serve` runs one (one process, or a supervisor and workers on one state);
:func:`serve_settings` resolves :class:`ServeSettings` from flags, witness.toml and defaults,
and :func:`app_factory` and :func:`request_logger` are the pieces ``tlog-witness serve``
builds from them.

**The configuration files** (:mod:`witness.config`, :mod:`witness.loglist`): witness.toml
(:func:`load_config`, :func:`parse_config` → :class:`FileConfig`; :func:`starter_config`;
the connection :class:`Limits`) and the logs/v0 list (:func:`parse_log_list` →
:class:`ListedLog`).

**The errors.** All derive from :class:`tlog.errors.TlogError` (:mod:`tlog.errors`: malformed
input, failed verification, usage). The state's: :class:`StateError`, :class:`BackendError`
(the database failed), :class:`CommitUnknownError` (a COMMIT got no verdict),
:class:`CorruptStateError`. The server's (each one HTTP status, :mod:`witness.errors`):
:class:`WitnessError` and its subclasses. The client's (:mod:`witness.responses`):
:class:`WitnessClientError` → :class:`WitnessConflict` (409), :class:`WitnessRejected`,
:class:`WitnessAlarm` (a possible split view), :class:`WitnessBusy` (429),
:class:`WitnessUnavailable`, :class:`WitnessBadResponse`. A log list that cannot be fetched:
:class:`FetchError`.

The command ``tlog-witness`` (:mod:`witness.cli`) is argument parsing and printing around
these; ``tlog-witness conformance`` (:mod:`witness.conformance`) tests any witness by URL.
"""

from __future__ import annotations

import sys

# Not typing.TYPE_CHECKING: importing typing would cost more than the rest of this module
# (type checkers treat any TYPE_CHECKING name so).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from witness.admin import (
        evidence_files,
        evidence_json,
        find_evidence,
        import_state,
        init_witness,
    )
    from witness.client import WitnessClient
    from witness.config import FileConfig, Limits, load_config, parse_config, starter_config
    from witness.errors import FetchError, WitnessError
    from witness.gathering import GatherResult, WitnessOutcome, gather
    from witness.loglist import ListedLog, parse_log_list
    from witness.open import open_state
    from witness.pull import pull_logs, read_log_list
    from witness.responses import (
        WitnessAlarm,
        WitnessBadResponse,
        WitnessBusy,
        WitnessClientError,
        WitnessConflict,
        WitnessRejected,
        WitnessUnavailable,
        merge_cosignatures,
        verify_cosignature_response,
    )
    from witness.server import make_app
    from witness.serving import app_factory, request_logger, serve
    from witness.settings import (
        ServeSettings,
        cosigner,
        find_config,
        key_paths,
        locate_state,
        open_existing,
        read_witness_keys,
        serve_settings,
    )
    from witness.sqlstate import BackendError, CommitUnknownError, CorruptStateError, StateError
    from witness.state import Cosigned, Evidence, LogConfig, WitnessState

_HOME = {
    "witness.open": ("open_state",),
    "witness.state": ("Cosigned", "Evidence", "LogConfig", "WitnessState"),
    "witness.admin": (
        "evidence_files",
        "evidence_json",
        "find_evidence",
        "import_state",
        "init_witness",
    ),
    "witness.pull": ("pull_logs", "read_log_list"),
    "witness.settings": (
        "ServeSettings",
        "cosigner",
        "find_config",
        "key_paths",
        "locate_state",
        "open_existing",
        "read_witness_keys",
        "serve_settings",
    ),
    "witness.client": ("WitnessClient",),
    "witness.gathering": ("GatherResult", "WitnessOutcome", "gather"),
    "witness.responses": (
        "WitnessAlarm",
        "WitnessBadResponse",
        "WitnessBusy",
        "WitnessClientError",
        "WitnessConflict",
        "WitnessRejected",
        "WitnessUnavailable",
        "merge_cosignatures",
        "verify_cosignature_response",
    ),
    "witness.server": ("make_app",),
    "witness.serving": ("app_factory", "request_logger", "serve"),
    "witness.config": ("FileConfig", "Limits", "load_config", "parse_config", "starter_config"),
    "witness.loglist": ("ListedLog", "parse_log_list"),
    "witness.errors": ("FetchError", "WitnessError"),
    "witness.sqlstate": ("BackendError", "CommitUnknownError", "CorruptStateError", "StateError"),
}
"""The module that holds each public name (the map above), imported on first use."""

_MODULE_OF = {name: module for module, names in _HOME.items() for name in names}

__all__ = [
    "BackendError",
    "CommitUnknownError",
    "CorruptStateError",
    "Cosigned",
    "Evidence",
    "FetchError",
    "FileConfig",
    "GatherResult",
    "Limits",
    "ListedLog",
    "LogConfig",
    "ServeSettings",
    "StateError",
    "WitnessAlarm",
    "WitnessBadResponse",
    "WitnessBusy",
    "WitnessClient",
    "WitnessClientError",
    "WitnessConflict",
    "WitnessError",
    "WitnessOutcome",
    "WitnessRejected",
    "WitnessState",
    "WitnessUnavailable",
    "app_factory",
    "cosigner",
    "evidence_files",
    "evidence_json",
    "find_config",
    "find_evidence",
    "gather",
    "import_state",
    "init_witness",
    "key_paths",
    "load_config",
    "locate_state",
    "make_app",
    "merge_cosignatures",
    "open_existing",
    "open_state",
    "parse_config",
    "parse_log_list",
    "pull_logs",
    "read_log_list",
    "read_witness_keys",
    "request_logger",
    "serve",
    "serve_settings",
    "starter_config",
    "verify_cosignature_response",
]


def __getattr__(name: str) -> Any:
    """A public name, from its module (imported now if it was not yet)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'witness' has no attribute {name!r}")
    # __import__ rather than importlib.import_module: importlib is one more module to load.
    __import__(module)
    value = getattr(sys.modules[module], name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
