"""A canary app for the live-Prometheus test: retrievals tagged retriever.version v1 / v2, metrics on loopback.

    python -m tests.integration.canary_app PORT --v2-first-share 0.3 [--v1-first-share 0.9] [--rerank-v1]

Every retrieval returns a relevant and an irrelevant document; v1 ranks the relevant one first at
``--v1-first-share`` (default 90 % of the time: AP 1, else 0.5), v2 at ``--v2-first-share`` (0.9: equal variants).
With ``--rerank-v1``, v1's retrievals go through a reranker (``stage=rerank``) that puts the relevant document
first (AP 1); the variant is set on the retrieval span only, so the rerank evaluations carry it from there.
Judged by ``FakeJudge`` against the query, in process, with ``segments=retriever.version``; ``/metrics`` is
served on 127.0.0.1:PORT. Runs until killed.
"""

from __future__ import annotations

import argparse
import random
import time

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider

import cp_observe
from cp_observe._wiring._providers import start_prometheus_endpoint
from cp_observe.testing import FakeJudge

RELEVANT = "Paris is the capital of France."
IRRELEVANT = "Bananas are yellow."


def main() -> None:
    """Serve metrics and retrieve forever at about ``--rate`` retrievals per second."""
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--v2-first-share", type=float, default=0.9)
    parser.add_argument("--v1-first-share", type=float, default=0.9)
    parser.add_argument("--rerank-v1", action="store_true")
    parser.add_argument("--rate", type=float, default=40.0)
    args = parser.parse_args()
    meter_provider = MeterProvider(metric_readers=[start_prometheus_endpoint(args.port, "127.0.0.1")])
    cp_observe.configure(judge=FakeJudge(), meter_provider=meter_provider, segments="retriever.version",
                         sample_rate=1.0)
    rng = random.Random(23)

    @cp_observe.retriever(name="kb")
    def search(query: str, version: str) -> list[str]:
        trace.get_current_span().set_attribute("retriever.version", version)
        share = args.v1_first_share if version == "v1" else args.v2_first_share
        return [RELEVANT, IRRELEVANT] if rng.random() < share else [IRRELEVANT, RELEVANT]

    @cp_observe.reranker(name="relevant-first")
    def rerank(query: str, documents: list[str]) -> list[str]:
        return sorted(documents, key=lambda d: d != RELEVANT)

    tracer = trace.get_tracer("canary-app")
    i = 0
    while True:
        version = "v2" if i % 2 else "v1"
        with tracer.start_as_current_span("turn"):  # one trace: the reranker is named after this retrieval
            documents = search("What is the capital city of France?", version)
            if args.rerank_v1 and version == "v1":
                rerank("What is the capital city of France?", documents)
        i += 1
        time.sleep(1.0 / args.rate)


if __name__ == "__main__":
    main()
