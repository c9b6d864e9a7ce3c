"""Scale-out proof: three scorer replicas behind a trace-id router, several apps, one replica restarted mid-run.

The OpenTelemetry Collector binary cannot be installed here, so ``TraceRouter`` (``tests/serve_support.py``)
stands in for the gateway's ``loadbalancing`` exporter with ``routing_key: traceID``: the same CRC-32 hash
ring over trace ids, one sending queue per backend, retries that honour ``RetryInfo``. Everything else is real:
the apps are separate processes running the hook in capture-only mode and exporting through the SDK's
OTLP/HTTP exporter; the replicas are ``python -m cp_observe.serve`` processes judging with the lexical judge and
exporting evaluation spans and metrics over OTLP to a real receiver.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cp_observe import _names as n
from tests.serve_support import (
    ROOT,
    OtlpSink,
    Replica,
    TraceRouter,
    app_command,
    free_port,
    produced,
    read_line,
    subprocess_env,
)

pytestmark = pytest.mark.e2e  # a whole program in child processes: not the quick unit tier

APPS = 3
TURNS = 60
SAMPLE_RATE = 0.5


@dataclass
class Run:
    """What one run of the cluster left behind."""

    retrievals: list[dict[str, Any]]
    sink: OtlpSink
    router: TraceRouter
    victim_endpoint: str
    delivered_before_restart: int
    victim_first_output: str


def _run_cluster(tmp_path: Path, sink: OtlpSink) -> Run:
    """Three replicas, a router, three paused apps; restart replica 1 between the two halves of the traffic."""
    args = ["--judge", "lexical", "--sample-rate", str(SAMPLE_RATE), "--queue-size", "50", "--concurrency", "2",
            "--otlp-endpoint", sink.url, "--drain-timeout-s", "20", "--retry-after-s", "0.2"]
    replicas = [
        Replica(free_port(), free_port(), args,
                subprocess_env(OTEL_BSP_SCHEDULE_DELAY="100", OTEL_RESOURCE_ATTRIBUTES=f"test.replica={i}"))
        for i in range(3)
    ]
    apps: list[subprocess.Popen[str]] = []
    router: TraceRouter | None = None
    outs = [tmp_path / f"app-{i}.json" for i in range(APPS)]
    try:
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.wait_ready()
        router = TraceRouter([r.endpoint for r in replicas])
        for i, out in enumerate(outs):
            command = app_command(router.url, "http", out, turns=TURNS, sample_rate=SAMPLE_RATE,
                                  service=f"app-{i}", pace=0.01, pause=True)
            apps.append(subprocess.Popen(command, cwd=ROOT, env=subprocess_env(), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True))
        for app in apps:  # the first half of the traffic is sent and flushed
            assert read_line(app).strip() == "half"
        assert router.drain(30)

        victim = replicas[1]
        backend = router.backends[victim.endpoint]
        delivered_before = backend.delivered
        backend.failed.clear()
        assert victim.process is not None
        victim.process.terminate()  # SIGTERM: drain what was accepted, refuse the rest
        for app in apps:  # the second half flows while the victim drains and is down
            assert app.stdin is not None
            app.stdin.write("go\n")
            app.stdin.flush()
        assert victim.process.wait(30) == 0, victim.output()
        first_output = victim.output()
        assert backend.failed.wait(30), "nothing was refused while the replica was down"
        victim.start().wait_ready()
        for app in apps:
            assert app.wait(60) == 0
        assert router.drain(60)
        for replica in replicas:
            assert replica.stop() == 0, replica.output()
        return Run([r for out in outs for r in produced(out)], sink, router, victim.endpoint, delivered_before,
                   first_output)
    finally:
        for app in apps:
            if app.poll() is None:
                app.kill()
        for replica in replicas:
            if replica.process is not None and replica.process.poll() is None:
                replica.process.kill()
        if router is not None:
            router.close()


def test_three_replicas_score_every_sampled_retrieval_exactly_once_across_a_restart(tmp_path: Path) -> None:
    """A router stands in for the Collector (not installable here): scored once, books balance, restart loses none."""
    sink = OtlpSink()
    try:
        run = _run_cluster(tmp_path, sink)
    finally:
        sink.close()

    sampled = Counter(r["span_id"] for r in run.retrievals if r["sampled"])
    assert len(run.retrievals) == APPS * TURNS and 0 < len(sampled) < len(run.retrievals)
    assert Counter(e.parent_span_id for e in sink.evaluations) == sampled  # each exactly once, nothing else

    # The restart happened mid-run, the sender retried what was refused, and nothing was given up.
    victim = run.router.backends[run.victim_endpoint]
    assert victim.delivered > run.delivered_before_restart and sum(victim.failures.values()) > 0
    assert sum(b.lost for b in run.router.backends.values()) == 0
    assert "draining" in run.victim_first_output and "dropped 0" in run.victim_first_output
    assert set(Counter(e.resource["test.replica"] for e in sink.evaluations)) == {"0", "1", "2"}
    lives = {e.resource["service.instance.id"] for e in sink.evaluations if e.resource["test.replica"] == "1"}
    assert len(lives) == 2, "the restarted replica scored before and after its restart"

    # sampled == scored + failed + dropped + skipped, per replica process and summed over all of them.
    sampled_by = sink.totals(n.METRIC_SAMPLED)
    outcomes = sink.totals(n.METRIC_EVALUATIONS, by=n.OUTCOME)
    instances = {instance for instance, _ in sampled_by}
    assert len(instances) == 4  # three replicas, one of them twice
    for instance in instances:
        assert sampled_by[(instance, "")] == sum(v for (i, _), v in outcomes.items() if i == instance)
    assert sum(sampled_by.values()) == len(sampled)
    assert sum(v for (_, outcome), v in outcomes.items() if outcome == n.OUTCOME_SCORED) == len(sampled)
    assert sum(v for (_, outcome), v in outcomes.items() if outcome == n.OUTCOME_DROPPED) == 0
