"""Measure the witness's hand-written Prometheus metrics against ``prometheus_client``:
``python -m bench.metrics_probe [--workers N] [--observations N]``.

The question (issue 12): should ``prometheus_client`` replace :mod:`witness.metrics`, so that a
scrape of one worker shows every worker's counters? Its multiprocess mode is the only way it
does that: every process writes its samples to mmap'ed files in a shared directory
(``PROMETHEUS_MULTIPROC_DIR``, set before the import), and a scrape reads and merges all of
them. This probe times, in one process each (the mode is chosen at import):

* one request's bookkeeping: :meth:`witness.metrics.Metrics.observe` against a labelled
  ``Counter.inc`` plus ``Histogram.observe`` of ``prometheus_client``, in its default mode and
  in multiprocess mode;
* one scrape: :meth:`Metrics.render` against ``generate_latest`` over a
  ``MultiProcessCollector`` of ``--workers`` processes' files;

and counts the files the shared directory holds. ``prometheus_client`` is not a dependency of
the project: the probe reports only our figures when it is not installed. Prints one JSON
object.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

from witness.metrics import LATENCY_BUCKETS, Metrics
from witness.state import LogConfig

_ENDPOINTS = ("add-checkpoint", "monitoring", "status", "metrics")
_STATUSES = (200, 409, 422)


def _ours(observations: int) -> dict[str, float]:
    m = Metrics(worker=0)
    i = [0]

    def observe() -> None:
        n = i[0] = i[0] + 1
        m.observe(_ENDPOINTS[n % 4], _STATUSES[n % 3], 0.0003 * (n % 50))

    per_observe = min(timeit.repeat(observe, number=observations, repeat=5)) / observations
    logs = [LogConfig(f"example.com/{k}", ("k",)) for k in range(8)]
    render = min(timeit.repeat(lambda: m.render(logs, 8, 4, 0), number=200, repeat=5)) / 200
    return {"observe_us": per_observe * 1e6, "render_us": render * 1e6}


def _theirs(observations: int, workers: int, directory: str | None) -> dict[str, Any]:
    """In a child process: prometheus_client's mode is fixed at import by the environment."""
    env = dict(os.environ)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if directory is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = directory
    args = [sys.executable, "-m", "bench.metrics_probe", "--child"]
    args += ["--observations", str(observations), "--workers", str(workers)]
    done = subprocess.run(args, capture_output=True, env=env, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _child(observations: int, workers: int) -> dict[str, Any]:
    # Imported by name: optional, not a dependency (and its mode is fixed at import).
    p: Any = importlib.import_module("prometheus_client")
    multiprocess: Any = importlib.import_module("prometheus_client.multiprocess")

    multi = "PROMETHEUS_MULTIPROC_DIR" in os.environ
    registry = p.CollectorRegistry()
    requests = p.Counter(
        "witness_http_requests", "requests", ["endpoint", "code"], registry=registry
    )
    latency = p.Histogram(
        "witness_http_request_duration_seconds",
        "latency",
        ["endpoint"],
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    i = [0]

    def observe() -> None:
        n = i[0] = i[0] + 1
        requests.labels(_ENDPOINTS[n % 4], str(_STATUSES[n % 3])).inc()
        latency.labels(_ENDPOINTS[n % 4]).observe(0.0003 * (n % 50))

    per_observe = min(timeit.repeat(observe, number=observations, repeat=5)) / observations
    out: dict[str, Any] = {"observe_us": per_observe * 1e6, "multiprocess": multi}
    if multi:
        directory = os.environ["PROMETHEUS_MULTIPROC_DIR"]
        # The other workers' files: copies of this one's under their pids' names.
        for path in list(Path(directory).iterdir()):
            stem, pid = path.stem.rsplit("_", 1)
            for w in range(1, workers):
                path.with_name(f"{stem}_{int(pid) + w}.db").write_bytes(path.read_bytes())
        scrape = p.CollectorRegistry()
        multiprocess.MultiProcessCollector(scrape)
        out["render_us"] = (
            min(timeit.repeat(lambda: p.generate_latest(scrape), number=50, repeat=5)) / 50 * 1e6
        )
        files = list(Path(directory).iterdir())
        out["files"] = len(files)
        out["bytes"] = sum(f.stat().st_size for f in files)
    else:
        out["render_us"] = (
            min(timeit.repeat(lambda: p.generate_latest(registry), number=200, repeat=5))
            / 200
            * 1e6
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--observations", type=int, default=20000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.observations, args.workers)))
        return 0
    report: dict[str, Any] = {"ours": _ours(args.observations)}
    if importlib.util.find_spec("prometheus_client") is None:
        report["prometheus_client"] = "not installed"
    else:
        report["prometheus_client"] = _theirs(args.observations, args.workers, None)
        with tempfile.TemporaryDirectory() as directory:
            report["prometheus_client_multiprocess"] = _theirs(
                args.observations, args.workers, directory
            )
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
