"""Overload: when targets are refused, the answers that release waiting retrievals are still taken."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import cp_observe
from tests.conftest import Otel


def test_full_queue_never_stalls_judging(otel: Otel) -> None:
    """Retrievals waiting for their agent cannot hold every slot: the agent's answer is always taken."""
    release = threading.Event()

    references: list[str] = []

    class Gated:
        model = "gated"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            references.append(reference)
            while not release.is_set():
                await asyncio.sleep(0.005)
            return [cp_observe.Verdict(i, True) for i in range(len(contexts))]

    # A long turn timeout: if answers were refused, the waiting retrievals would sit there for an hour.
    processor = otel.processor(Gated(), queue_size=4, concurrency=1, turn_timeout_s=3600)

    @cp_observe.retriever(name="kb")
    def search(query: str) -> list[str]:
        return ["a context"]

    @cp_observe.agent(name="bot")
    def ask(question: str) -> str:
        search(question)
        return "an answer"

    for i in range(40):
        ask(f"q{i}")
    release.set()
    assert processor.force_flush(20_000)
    stats = processor.stats()
    assert stats["pending"] == 0
    assert stats["scored"] >= 4
    assert stats["sampled"] == stats["scored"] + stats["dropped"] + stats["failed"] + stats["skipped"]
    assert stats["reasons"].get("skipped:no_reference", 0) == 0
    # Every scored retrieval was judged against the agent's answer, not left to time out on its query.
    assert set(stats["reasons"]) <= {"scored:ok", "dropped:queue_full"}
    assert len(references) == stats["scored"]
    assert set(references) == {"an answer"}  # the agent's answer (reference "output"), never the query
