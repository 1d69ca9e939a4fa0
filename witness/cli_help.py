"""The help texts of ``tlog-witness``: the command's epilog and each verb's (``VERB --help``).

They are the operator's reference at the shell, and what docs/operator-guide.md quotes:
change one only with the behaviour it describes. :mod:`witness.cli` declares each verb with
its text.
"""

from __future__ import annotations

from witness.config import (
    CONFIG_FILE,
    DB_FILE,
    KEY_FILE,
    LIMIT_COUNTS,
    LIMIT_SECONDS,
    MLDSA_KEY_FILE,
    SETTINGS,
)
from witness.pull import DEFAULT_FETCH_TIMEOUT
from witness.settings import ENV_CONFIG, ENV_DB, ENV_POSTGRES, PROG, flag

EPILOG_MAIN = f"""\
Run '{PROG} VERB --help' for the details and examples of a verb.

state options (every verb but vkey; --config: every verb but init; before or after the verb --
given on both sides, the later wins):
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

EPILOG_INIT = f"""\
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

EPILOG_VKEY = f"""\
Prints the witness's vkeys, one per line, from its key files: --key FILE (repeatable), else
the config file's keys, else {KEY_FILE} (and {MLDSA_KEY_FILE} when it exists) in the
config file's directory or the current directory.

examples:
  {PROG} vkey --config /var/lib/witness/witness.toml
"""

EPILOG_ADD_LOG = f"""\
Follows a new log: its checkpoints are cosigned when signed by one of its keys (vkeys of type
0x01 Ed25519 or 0x06 ML-DSA-44; repeat --key for several). --qpd caps the add-checkpoint
requests per UTC day (429 beyond). --tiles URL names where the log publishes itself as
C2SP tlog-tiles (URL/checkpoint, URL/tile/...): '{PROG} feed' then follows it (see
set-tiles). An origin already configured, even disabled, is refused: logs are never deleted,
since re-adding one could let the witness cosign a split view.

examples:
  {PROG} add-log example.com/log --key example.com/log+0123abcd+AQ... --qpd 86400
  {PROG} add-log example.com/journal/acme --key example.com/journal/acme+89ab4567+AQ... \\
      --tiles https://example.com/journal/acme/
"""

EPILOG_SET_TILES = f"""\
Sets the URL a configured log publishes its C2SP tlog-tiles under (http:// or https://, no
query; a '/' is added at the end), which '{PROG} feed' reads the log from; 'none' clears it
(the witness then only cosigns what is submitted to it).

examples:
  {PROG} set-tiles example.com/journal/acme https://example.com/journal/acme/
  {PROG} set-tiles example.com/journal/acme none
"""

EPILOG_FEED = f"""\
Follows every enabled log that has a tiles URL (add-log --tiles, set-tiles), or only those
given with --origin: each round fetches the log's checkpoint, checks it is signed by the log's
keys, fetches the tiles a consistency proof from the witness's cosigned size needs, builds the
proof itself and submits it through the very checks of POST /add-checkpoint (the log's
signature, the quota, consistency with the stored checkpoint, the durable compare-and-swap):
it cosigns nothing the server would refuse. A fork (a served tree not consistent with the
cosigned one, or another root at the cosigned size) is refused and kept as evidence ('{PROG}
evidence'). A log serving a smaller size than the cosigned one is reported and left alone.

One line per log and round on standard output (--json: one JSON object): cosigned, unchanged,
behind, refused, lost (another submitter was first; the next round catches up) or unusable
(a fetch failed, or the tiles do not hash to the checkpoint's root; the next round retries).
The keys and name are those of 'serve' (--key, --name, or witness.toml). It runs beside
'serve' on the same state, a round every --interval seconds (default 60) until SIGTERM or
SIGINT (exit 0); --once runs one round and exits 1 if a log was refused, 4 if a round was
unusable, else 0.

examples:
  {PROG} feed --config /var/lib/witness/witness.toml
  {PROG} feed --once --origin example.com/journal/acme
"""

EPILOG_ADD_KEY = f"""\
Trusts one more key for a configured log (key rotation); keys are never removed.

examples:
  {PROG} add-key example.com/log example.com/log+4567cdef+AQ...
"""

EPILOG_DISABLE = f"""\
A disabled log keeps its state; its checkpoints are refused with 404 (the body says it is
disabled). enable-log undoes it. Nothing ever deletes a log.

examples:
  {PROG} disable-log example.com/log
  {PROG} enable-log example.com/log
"""

EPILOG_LIST = f"""\
One line per log: the origin (JSON-quoted), enabled or disabled, the size of the latest
cosigned checkpoint and when it was cosigned, the qpd, then one '  key VKEY' line per key.
--json prints one object per log per line (JSON Lines): origin, keys, qpd, disabled, size,
root (base64), updated_at (Unix seconds); null when never cosigned.

examples:
  {PROG} list-logs --json | jq -r 'select(.size == null) | .origin'
"""

EPILOG_PULL = f"""\
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

EPILOG_EVIDENCE = f"""\
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

EPILOG_EXPORT = f"""\
Writes every log's configuration and latest cosigned note, from one consistent snapshot, in
the tlog-witness-state v1 format (witness/sqlstate.py) to --out FILE (written under a
temporary name and renamed when complete) or standard output. Evidence is not exported.

examples:
  {PROG} export-state --out witness.state
"""

EPILOG_IMPORT = f"""\
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


def serve_epilog() -> str:
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
        **{key: flag(key) + " S" for key in LIMIT_SECONDS},
        **{key: flag(key) + " N" for key in LIMIT_COUNTS},
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
and, unless disabled, / (HTML status), /evidence and /metrics (Prometheus).

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
