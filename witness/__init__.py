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

from tlog.lazy import lazy_exports

# Not typing.TYPE_CHECKING: importing typing would cost more than the rest of this module
# (type checkers treat any TYPE_CHECKING name so).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from witness.admin import evidence_files as evidence_files
    from witness.admin import evidence_json as evidence_json
    from witness.admin import find_evidence as find_evidence
    from witness.admin import import_state as import_state
    from witness.admin import init_witness as init_witness
    from witness.client import WitnessClient as WitnessClient
    from witness.config import FileConfig as FileConfig
    from witness.config import Limits as Limits
    from witness.config import load_config as load_config
    from witness.config import parse_config as parse_config
    from witness.config import starter_config as starter_config
    from witness.errors import FetchError as FetchError
    from witness.errors import WitnessError as WitnessError
    from witness.gathering import GatherResult as GatherResult
    from witness.gathering import WitnessOutcome as WitnessOutcome
    from witness.gathering import gather as gather
    from witness.loglist import ListedLog as ListedLog
    from witness.loglist import parse_log_list as parse_log_list
    from witness.open import open_state as open_state
    from witness.pull import pull_logs as pull_logs
    from witness.pull import read_log_list as read_log_list
    from witness.responses import WitnessAlarm as WitnessAlarm
    from witness.responses import WitnessBadResponse as WitnessBadResponse
    from witness.responses import WitnessBusy as WitnessBusy
    from witness.responses import WitnessClientError as WitnessClientError
    from witness.responses import WitnessConflict as WitnessConflict
    from witness.responses import WitnessRejected as WitnessRejected
    from witness.responses import WitnessUnavailable as WitnessUnavailable
    from witness.responses import merge_cosignatures as merge_cosignatures
    from witness.responses import verify_cosignature_response as verify_cosignature_response
    from witness.server import make_app as make_app
    from witness.serving import app_factory as app_factory
    from witness.serving import request_logger as request_logger
    from witness.serving import serve as serve
    from witness.settings import ServeSettings as ServeSettings
    from witness.settings import cosigner as cosigner
    from witness.settings import find_config as find_config
    from witness.settings import key_paths as key_paths
    from witness.settings import locate_state as locate_state
    from witness.settings import open_existing as open_existing
    from witness.settings import read_witness_keys as read_witness_keys
    from witness.settings import serve_settings as serve_settings
    from witness.sqlstate import BackendError as BackendError
    from witness.sqlstate import CommitUnknownError as CommitUnknownError
    from witness.sqlstate import CorruptStateError as CorruptStateError
    from witness.sqlstate import StateError as StateError
    from witness.state import Cosigned as Cosigned
    from witness.state import Evidence as Evidence
    from witness.state import LogConfig as LogConfig
    from witness.state import WitnessState as WitnessState

_MODULE_OF = {
    "app_factory": "witness.serving",
    "BackendError": "witness.sqlstate",
    "CommitUnknownError": "witness.sqlstate",
    "CorruptStateError": "witness.sqlstate",
    "Cosigned": "witness.state",
    "cosigner": "witness.settings",
    "Evidence": "witness.state",
    "evidence_files": "witness.admin",
    "evidence_json": "witness.admin",
    "FetchError": "witness.errors",
    "FileConfig": "witness.config",
    "find_config": "witness.settings",
    "find_evidence": "witness.admin",
    "gather": "witness.gathering",
    "GatherResult": "witness.gathering",
    "import_state": "witness.admin",
    "init_witness": "witness.admin",
    "key_paths": "witness.settings",
    "Limits": "witness.config",
    "ListedLog": "witness.loglist",
    "load_config": "witness.config",
    "locate_state": "witness.settings",
    "LogConfig": "witness.state",
    "make_app": "witness.server",
    "merge_cosignatures": "witness.responses",
    "open_existing": "witness.settings",
    "open_state": "witness.open",
    "parse_config": "witness.config",
    "parse_log_list": "witness.loglist",
    "pull_logs": "witness.pull",
    "read_log_list": "witness.pull",
    "read_witness_keys": "witness.settings",
    "request_logger": "witness.serving",
    "serve": "witness.serving",
    "serve_settings": "witness.settings",
    "ServeSettings": "witness.settings",
    "starter_config": "witness.config",
    "StateError": "witness.sqlstate",
    "verify_cosignature_response": "witness.responses",
    "WitnessAlarm": "witness.responses",
    "WitnessBadResponse": "witness.responses",
    "WitnessBusy": "witness.responses",
    "WitnessClient": "witness.client",
    "WitnessClientError": "witness.responses",
    "WitnessConflict": "witness.responses",
    "WitnessError": "witness.errors",
    "WitnessOutcome": "witness.gathering",
    "WitnessRejected": "witness.responses",
    "WitnessState": "witness.state",
    "WitnessUnavailable": "witness.responses",
}
"""The module that holds each public name (the map above), imported on first use."""

# fmt: off
__all__ = [  # sorted; where each name lives and what it is: the map above
    "BackendError", "CommitUnknownError", "CorruptStateError", "Cosigned", "Evidence",
    "FetchError", "FileConfig", "GatherResult", "Limits", "ListedLog", "LogConfig",
    "ServeSettings", "StateError", "WitnessAlarm", "WitnessBadResponse", "WitnessBusy",
    "WitnessClient", "WitnessClientError", "WitnessConflict", "WitnessError", "WitnessOutcome",
    "WitnessRejected", "WitnessState", "WitnessUnavailable", "app_factory", "cosigner",
    "evidence_files", "evidence_json", "find_config", "find_evidence", "gather", "import_state",
    "init_witness", "key_paths", "load_config", "locate_state", "make_app",
    "merge_cosignatures", "open_existing", "open_state", "parse_config", "parse_log_list",
    "pull_logs", "read_log_list", "read_witness_keys", "request_logger", "serve",
    "serve_settings", "starter_config", "verify_cosignature_response",
]
# fmt: on


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF, __all__)
