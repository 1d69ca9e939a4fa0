"""The witness server's Prometheus metrics: counters and histograms kept in memory.

:class:`Metrics` counts requests by endpoint and status, with a latency histogram per endpoint
(:data:`LATENCY_BUCKETS`), cosignatures issued, evidence kept or not kept, and connections
closed by reason; :meth:`Metrics.render` writes them, with the gauges of the moment (logs,
cosigned logs, open connections, body bytes reserved), in the Prometheus text format 0.0.4,
by hand: ``GET /metrics`` (:mod:`witness.monitoring`). A server process that is one of several
workers labels every sample ``worker="N"``.

**Why not prometheus_client** (decided for issue 12, measured with ``python -m
bench.metrics_probe``). With several workers a scrape reaches whichever worker the kernel gives
the connection, so it sees that worker's series only; ``prometheus_client`` merges workers only
in its multiprocess mode, which we measured (0.26.0, on the 2-core benchmark machine under
load, best of 5): one request's bookkeeping (a labelled counter and a histogram) 8-19 µs
against 1.4-3 µs here, and one scrape of two workers 1.5-3.9 ms against 0.06-0.13 ms here
(its default mode 1.5 ms too). Beyond the cost, the mode needs a directory shared by the
workers, set in the environment before the import and emptied at every start (files of
processes that are gone are merged forever: two mmap'ed files of 128 KiB per process and metric
type), and per-gauge rules (our open connections and reserved body bytes are per process) — a
new dependency and new state to operate, for counters that the ``worker`` label already keeps
apart and a query adds up (``sum without (worker) (rate(…))``). So the exposition stays ours.
What that leaves: each scrape shows one worker, so the other workers' series have gaps between
the scrapes that reach them; ``rate()`` and ``increase()`` over a range of several scrape
intervals read them right.
"""

from __future__ import annotations

from witness.state import LogConfig

__all__ = ["LATENCY_BUCKETS", "Metrics"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the request latency histogram."""


class Metrics:
    """Prometheus counters and histograms, kept in memory, written by hand (text format 0.0.4)."""

    def __init__(self, worker: int | None = None) -> None:
        self.worker = worker
        self.requests: dict[tuple[str, int], int] = {}
        self.buckets: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.cosignatures = 0
        self.evidence = 0
        self.evidence_skipped = 0
        self.connections_closed: dict[str, int] = {}

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        key = (endpoint, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        buckets = self.buckets.setdefault(endpoint, [0] * len(LATENCY_BUCKETS))
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                buckets[i] += 1
        self.sums[endpoint] = self.sums.get(endpoint, 0.0) + seconds
        self.counts[endpoint] = self.counts.get(endpoint, 0) + 1

    def render(
        self, logs: list[LogConfig], cosigned: int, open_connections: int, body_bytes: int
    ) -> str:
        out = [
            "# HELP witness_http_requests_total HTTP requests by endpoint and status code.",
            "# TYPE witness_http_requests_total counter",
        ]
        for (endpoint, status), n in sorted(self.requests.items()):
            out.append(f'witness_http_requests_total{{endpoint="{endpoint}",code="{status}"}} {n}')
        out += [
            "# HELP witness_http_request_duration_seconds Request latency by endpoint.",
            "# TYPE witness_http_request_duration_seconds histogram",
        ]
        for endpoint in sorted(self.counts):
            for bound, n in zip(LATENCY_BUCKETS, self.buckets[endpoint], strict=True):
                out.append(
                    f'witness_http_request_duration_seconds_bucket{{endpoint="{endpoint}",'
                    f'le="{bound:g}"}} {n}'
                )
            total = self.counts[endpoint]
            out.append(
                f'witness_http_request_duration_seconds_bucket{{endpoint="{endpoint}",'
                f'le="+Inf"}} {total}'
            )
            out.append(
                f'witness_http_request_duration_seconds_sum{{endpoint="{endpoint}"}} '
                f"{self.sums[endpoint]:.6f}"
            )
            out.append(
                f'witness_http_request_duration_seconds_count{{endpoint="{endpoint}"}} {total}'
            )
        disabled = sum(1 for c in logs if c.disabled)
        out += [
            "# HELP witness_logs Configured logs.",
            "# TYPE witness_logs gauge",
            f'witness_logs{{state="enabled"}} {len(logs) - disabled}',
            f'witness_logs{{state="disabled"}} {disabled}',
            "# HELP witness_logs_cosigned Logs with a cosigned checkpoint.",
            "# TYPE witness_logs_cosigned gauge",
            f"witness_logs_cosigned {cosigned}",
            "# HELP witness_cosignatures_total Cosignature lines issued by add-checkpoint.",
            "# TYPE witness_cosignatures_total counter",
            f"witness_cosignatures_total {self.cosignatures}",
            "# HELP witness_evidence_total Proven split views kept as evidence.",
            "# TYPE witness_evidence_total counter",
            f"witness_evidence_total {self.evidence}",
            "# HELP witness_evidence_not_kept_total Proven split views not kept: already kept,"
            " or the log's evidence is at its bound.",
            "# TYPE witness_evidence_not_kept_total counter",
            f"witness_evidence_not_kept_total {self.evidence_skipped}",
            "# HELP witness_connections Open client connections.",
            "# TYPE witness_connections gauge",
            f"witness_connections {open_connections}",
            "# HELP witness_connections_closed_total Connections the server closed or refused,"
            " by reason.",
            "# TYPE witness_connections_closed_total counter",
            *(
                f'witness_connections_closed_total{{reason="{reason}"}} {n}'
                for reason, n in sorted(self.connections_closed.items())
            ),
            "# HELP witness_body_bytes_reserved Request body bytes being read now.",
            "# TYPE witness_body_bytes_reserved gauge",
            f"witness_body_bytes_reserved {body_bytes}",
        ]
        if self.worker is not None:
            label = f'worker="{self.worker}"'
            out = [
                line
                if line.startswith("#")
                else line.replace("{", "{" + label + ",", 1)
                if "{" in line
                else line.replace(" ", "{" + label + "} ", 1)
                for line in out
            ]
        return "\n".join(out) + "\n"
