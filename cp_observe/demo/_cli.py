"""``cp-observe demo``: the bundled RAG app, run turn after turn through the hook, with scores printed live.

A BM25 retriever and an extractive answerer over a few dozen English and Japanese help-centre documents,
decorated with ``@retriever`` and ``@agent``. Every turn is scored by the offline judge (or by ``--judge
MODEL`` through litellm) in the background; the demo reads the results back from the evaluation spans the
hook emits, like any backend would. ``--degrade-after N`` swaps in a bad retriever under the same data
source id, so the sampled MAP visibly drops — and an alert on it fires. The default run (no ``--turns``,
``--degrade-after`` or ``--loop``) ends with such a degraded phase of ``DEGRADED_TURNS`` turns and prints the drop,
its interval and which of the shipped alerts would fire.

Between retriever and answerer sits a reranker stage (``@reranker``, ``demo/_rerank.py``): it reorders the retrieved
documents and keeps the best four. Its evaluations (``stage=rerank``, one judgement of both orders) are kept apart
from the MAP above: each turn prints its rerank lift, and the summary the mean lift per phase.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import sys
import threading
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

__all__ = ["CANARY_SEGMENT", "DATA_SOURCE", "DEGRADED_TURNS", "add_arguments", "run"]

DATA_SOURCE = "demo-bm25"
AGENT = "demo-agent"
RERANKER = "demo-rerank"
DEGRADED_TURNS = 24  # at least the alerts' minimum of 20 scored evaluations, so they can judge the drop
CANARY_SEGMENT = "retriever.version"  # the canary's variant attribute, and the demo's one segment
CANARY_CHUNK = 30  # characters per chunk of the canary's worse chunking
_SEGMENT_LABEL = "retriever_version"  # CANARY_SEGMENT's label name (what the segments setting makes of it)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options."""
    parser.add_argument("--judge", default=os.environ.get("CP_OBSERVE_JUDGE", "lexical"),
                        help="litellm model string of the judge, or 'lexical' (offline, default)")
    parser.add_argument("--judge-api-base", default=None, help="endpoint of the judge model")
    parser.add_argument("--otlp", metavar="ENDPOINT", default=None,
                        help="export traces, metrics and events over OTLP (else the OTEL_* variables decide)")
    parser.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")
    parser.add_argument("--degrade-after", type=int, default=None, metavar="N",
                        help="after N turns, swap in a bad retriever (same data source id) so the MAP drops "
                             f"(default run: after every question once, for {DEGRADED_TURNS} more turns)")
    parser.add_argument("--loop", action="store_true", help="keep asking questions until stopped (for the stack)")
    parser.add_argument("--turns", type=int, default=None,
                        help="how many turns to run (default: each demo question once; with --loop: forever)")
    parser.add_argument("--interval", type=float, default=None,
                        help="seconds between turns (default 0, or 1 with --loop)")
    parser.add_argument("--sample-rate", type=float, default=1.0, help="share of traces scored (default 1)")
    parser.add_argument("--no-capture-content", action="store_true", help="do not record content on spans")
    parser.add_argument("--service-name", default="cp-observe-demo", help="service.name of the demo")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    parser.add_argument("--canary-share", type=float, default=0.5, metavar="SHARE",
                        help="share of the healthy turns served by the canary retriever.version=v2, a worse "
                             "chunking (default 0.5; 0: no canary)")


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the exit code."""
    from cp_observe._log import log_to_stderr

    if args.turns is not None and args.turns < 0:
        print("--turns must be >= 0", file=sys.stderr)
        return 2
    if not 0 <= args.canary_share <= 1:
        print("--canary-share must be between 0 and 1", file=sys.stderr)
        return 2

    restore_logging = log_to_stderr()  # the demo shows our warnings (a backend refusing metrics, say)
    try:
        return _run(args)
    finally:
        restore_logging()


def _run(args: argparse.Namespace) -> int:
    import cp_observe
    from cp_observe.demo._corpus import CORPUS, QUESTIONS
    from cp_observe.demo._rag import BM25Retriever, DegradedRetriever, ExtractiveAnswerer, rechunk
    from cp_observe.demo._rerank import CoverageReranker

    printer = _Printer()
    processor = cp_observe.configure(
        args.judge,
        judge_api_base=args.judge_api_base,
        sample_rate=args.sample_rate,
        capture_content=not args.no_capture_content,
        service_name=args.service_name,
        otlp_endpoint=args.otlp,
        metrics_port=args.metrics_port,
        segments=CANARY_SEGMENT,  # the canary's variant labels the score series
    )
    from opentelemetry import trace

    provider: Any = trace.get_tracer_provider()
    provider.add_span_processor(printer)
    good, bad, answerer = BM25Retriever(CORPUS, k=5), DegradedRetriever(CORPUS, k=5, seed=7), ExtractiveAnswerer()
    state: dict[str, BM25Retriever | DegradedRetriever] = {"retriever": good}
    canary = BM25Retriever(rechunk(CORPUS, CANARY_CHUNK), k=5)  # v2: the same BM25 over a worse chunking
    variant = {"version": "v1"}

    @cp_observe.retriever(name=DATA_SOURCE)
    def search(query: str) -> list[Any]:
        trace.get_current_span().set_attribute(CANARY_SEGMENT, variant["version"])
        retriever = canary if variant["version"] == "v2" else state["retriever"]
        return list(retriever.search(query))

    reranker = CoverageReranker(top_n=4)

    @cp_observe.reranker(name=RERANKER)  # its evaluation: stage=rerank, under the retrieval's data source
    def rerank(query: str, documents: list[Any]) -> list[Any]:
        return reranker.rerank(query, documents)

    @cp_observe.agent(name=AGENT)
    def ask(question: str) -> str:
        return answerer.answer(question, rerank(question, search(question)))

    stop = _Stop()
    _stop_on_signals(stop)
    turns = args.turns if args.turns is not None else (None if args.loop else len(QUESTIONS))
    if args.turns is None and args.degrade_after is None and not args.loop:
        # The default run ends degraded: a newcomer sees a drop and the alerts' verdict, not only good scores.
        # With a canary, each question is asked by both variants before the degradation.
        healthy = len(QUESTIONS) * (2 if args.canary_share else 1)
        args.degrade_after, turns = healthy, healthy + DEGRADED_TURNS
    interval = args.interval if args.interval is not None else (1.0 if args.loop else 0.0)
    judge_name = processor.judge.model if processor is not None else "none"
    print(f"cp-observe demo: judge={judge_name}, sample_rate={args.sample_rate}, "
          f"{len(CORPUS)} documents, {len(QUESTIONS)} questions", flush=True)
    turn = 0
    try:
        while (turns is None or turn < turns) and not stop.is_set():
            if args.degrade_after is not None and turn == args.degrade_after:
                state["retriever"] = bad
                print(f"-- after {turn} turns: the retriever is degraded (same data source '{DATA_SOURCE}')",
                      flush=True)
            question = QUESTIONS[turn % len(QUESTIONS)].text
            degraded = state["retriever"] is bad
            variant["version"] = "v1" if degraded else _variant(turn, len(QUESTIONS), args.canary_share)
            answer = ask(question)
            if processor is not None:
                processor.force_flush(60_000)
            turn += 1
            printer.report(turn, turns, question, answer, quiet=args.quiet, degraded=degraded,
                           variant=variant["version"])
            if interval:
                stop.wait(interval)
    finally:
        _summary(printer, args.degrade_after, processor, canary=bool(args.canary_share))
        _shutdown()
    return 0


class _Printer(SpanProcessor):
    """Collects the scores the hook emits, from its evaluation spans, as a tracing backend would."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _latest and scores
        self._latest: tuple[tuple[bool, ...], float, str, str] | None = None
        self.scores: list[tuple[bool, float]] = []  # (degraded, average precision) of the retrieval stage
        self.variants: list[str] = []  # the retriever.version of each score in ``scores``
        # (AP after, lift, relevant documents cut, retriever.version) of the latest rerank evaluation
        self._latest_rerank: tuple[float, float, int, str] | None = None
        self.reranks: list[tuple[bool, float, str]] = []  # (degraded, AP, retriever.version) of the rerank stage
        self.lifts: list[tuple[bool, float, int]] = []  # (degraded, lift, relevant documents cut)
        self.failures = 0

    def on_end(self, span: ReadableSpan) -> None:
        from cp_observe import _names as n

        if span.name != n.EVALUATION_SPAN_NAME or not span.attributes:
            return
        attributes = span.attributes
        # The variant as the evaluation span carries it (the segment the demo configures), as a backend sees it;
        # a rerank evaluation carries the variant of the retrieval it reranked.
        segment = str(attributes.get(n.CP_SEGMENT_PREFIX + _SEGMENT_LABEL, n.SEGMENT_NONE))
        if attributes.get(n.CP_STAGE) == n.STAGE_RERANK:  # the reranker's evaluation: its lift, not the MAP
            if n.CP_RERANK_LIFT in attributes:
                with self._lock:
                    self._latest_rerank = (float(attributes[n.CP_AVERAGE_PRECISION]),  # type: ignore[arg-type]
                                           float(attributes[n.CP_RERANK_LIFT]),  # type: ignore[arg-type]
                                           int(attributes[n.CP_RERANK_DROPPED_RELEVANT]),  # type: ignore[arg-type]
                                           segment)
            return
        with self._lock:
            if n.CP_VERDICTS not in attributes:
                self.failures += 1
                self._latest = ((), -1.0, str(attributes.get(n.ERROR_TYPE, "error")), "")
                return
            verdicts = tuple(bool(v) for v in attributes[n.CP_VERDICTS])  # type: ignore[union-attr]
            self._latest = (verdicts, float(attributes[n.CP_AVERAGE_PRECISION]),  # type: ignore[arg-type]
                            str(attributes.get(n.GEN_AI_EVALUATION_SCORE_LABEL, "")), segment)

    def report(self, turn: int, turns: int | None, question: str, answer: str, *, quiet: bool,
               degraded: bool, variant: str = "v1") -> None:
        """Print one turn: its variant and phase, the answer, then each stage's score (retrieval, rerank)."""
        with self._lock:
            latest, self._latest = self._latest, None
            reranked, self._latest_rerank = self._latest_rerank, None
        if latest is not None and latest[1] >= 0:
            self.scores.append((degraded, latest[1]))
            self.variants.append(latest[3])
        if reranked is not None:
            self.lifts.append((degraded, reranked[1], reranked[2]))
            self.reranks.append((degraded, reranked[0], reranked[3]))
        if quiet:
            return
        phase = "degraded" if degraded else "healthy"
        print(f"{_bar(turn, turns)} {CANARY_SEGMENT}={variant}, {phase}: {question}", flush=True)
        print(f"        answer: {answer[:100].rstrip()}", flush=True)
        if latest is None:
            print("        not sampled", flush=True)
        elif latest[1] < 0:
            print(f"        judge failed: {latest[2]}", flush=True)
        else:
            verdicts, ap, label, _ = latest
            marks = " ".join(f"{i + 1}{'✓' if v else '✗'}" for i, v in enumerate(verdicts))
            # The running MAP of this turn's variant: mixing a worse canary into it would hide which one is bad.
            same = [s for (_, s), v in zip(self.scores, self.variants, strict=True) if v == latest[3]]
            mean = sum(same) / len(same)
            print(f"        retrieval ranks: {marks}   score {ap:.2f} ({label})   "
                  f"sampled MAP of {latest[3]} {mean:.2f}", flush=True)
        if reranked is not None:
            print(f"        rerank: score {reranked[0]:.2f}, lift {reranked[1]:+.2f}, "
                  f"relevant cut {reranked[2]}, {CANARY_SEGMENT}={reranked[3]}", flush=True)


def _bar(turn: int, turns: int | None, width: int = 20) -> str:
    if turns is None or turns == 0:
        return f"[{turn:>4}]"
    filled = round(width * turn / turns)
    return f"[{turn:>3}/{turns}] {'█' * filled}{'░' * (width - filled)}"


def _variant(turn: int, questions: int, share: float) -> str:
    """Which variant serves ``turn``: v2 for ``share`` of the turns, spread evenly.

    The second pass over the questions flips the parity, so over two passes each question is asked of both.
    """
    if not share:
        return "v1"
    if share >= 1:
        return "v2"
    shifted = turn + turn // questions
    return "v2" if int((shifted + 1) * share) > int(shifted * share) else "v1"


def _summary(printer: _Printer, degrade_after: int | None, processor: Any, *, canary: bool = False) -> None:
    scores = printer.scores
    if not scores:
        print("no turn was scored", flush=True)
        return
    mean = sum(s for _, s in scores) / len(scores)
    print(f"sampled MAP over {len(scores)} scored turns: {mean:.2f}", flush=True)
    if canary:
        from cp_observe import _names as n
        from cp_observe.demo._canary import report as canary_report

        # One report per stage, as the rules group by stage: a reranked turn is scored once in each.
        by_stage: dict[str, dict[str, list[float]]] = {n.STAGE_RETRIEVAL: {}, n.STAGE_RERANK: {}}
        for (degraded, score), version in zip(scores, printer.variants, strict=True):
            if not degraded:
                by_stage[n.STAGE_RETRIEVAL].setdefault(version, []).append(score)
        for degraded, score, version in printer.reranks:
            if not degraded:
                by_stage[n.STAGE_RERANK].setdefault(version, []).append(score)
        print(f"canary ({CANARY_SEGMENT}=v2: chunks of {CANARY_CHUNK} characters), healthy turns only:", flush=True)
        for stage, by_variant in by_stage.items():
            if by_variant:
                for line in canary_report(by_variant, label=CANARY_SEGMENT, stage=stage):
                    print(line, flush=True)
        # The degradation is judged on the stable variant: the canary's own gap is the verdict above.
        scores = [s for s, version in zip(scores, printer.variants, strict=True) if version == "v1"]
        if degrade_after is not None:
            print(f"the stable variant ({CANARY_SEGMENT}=v1), whose retriever is then degraded:", flush=True)
    if degrade_after is not None:
        for label, degraded in (("before degradation", False), ("after degradation", True)):
            part = [s for d, s in scores if d is degraded]
            if part:
                print(f"  {label}: {sum(part) / len(part):.2f} over {len(part)} turns", flush=True)
        from cp_observe.demo._alerts import report

        for line in report([s for d, s in scores if not d], [s for d, s in scores if d]):
            print(line, flush=True)
    _lift_summary(printer.lifts, degrade_after)
    if processor is not None:
        stats = processor.stats()
        print(f"evaluations: sampled {stats['sampled']}, scored {stats['scored']}, failed {stats['failed']}, "
              f"dropped {stats['dropped']}, skipped {stats['skipped']}", flush=True)


def _lift_summary(lifts: list[tuple[bool, float, int]], degrade_after: int | None) -> None:
    """The reranker stage: its mean lift (AP after - AP before), per phase, and the relevant documents it cut."""
    if not lifts:
        print("rerank lift: the reranker reordered no scored turn", flush=True)
        return
    mean = sum(lift for _, lift, _ in lifts) / len(lifts)
    cut = sum(c for _, _, c in lifts)
    print(f"rerank lift (AP after - AP before, one judgement): {mean:+.2f} over {len(lifts)} reranked turns, "
          f"{cut} relevant documents cut", flush=True)
    if degrade_after is not None:
        for label, degraded in (("before degradation", False), ("after degradation", True)):
            part = [lift for d, lift, _ in lifts if d is degraded]
            if part:
                print(f"  {label}: {sum(part) / len(part):+.2f} over {len(part)} turns", flush=True)


class _Stop:
    """Set by SIGINT or SIGTERM; the turn loop checks it and waits on it between turns.

    The signal handler runs in the main thread between two bytecodes, possibly while that thread is inside
    ``wait``: it must take no lock the main thread may hold. ``threading.Event.set`` would (the Condition's lock,
    held while ``Event.wait`` is still setting up); ``SimpleQueue.put`` is documented reentrant for exactly this
    use. Only the main thread reads ``_stopped``.
    """

    def __init__(self) -> None:
        self._signals: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._stopped = False

    def signal(self, signum: int, _frame: object) -> None:
        """The handler: one reentrant put, nothing else."""
        self._signals.put(signum)

    def is_set(self) -> bool:
        """True once a signal arrived."""
        if not self._stopped and not self._signals.empty():
            self._stopped = True
        return self._stopped

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a signal; True when one arrived (now or before)."""
        if self.is_set():
            return True
        try:
            self._signals.get(timeout=timeout)
        except queue.Empty:
            return False
        self._stopped = True
        return True


def _stop_on_signals(stop: _Stop) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop.signal)


def _shutdown() -> None:
    from opentelemetry import _logs, metrics, trace

    for provider in (trace.get_tracer_provider(), metrics.get_meter_provider(), _logs.get_logger_provider()):
        shutdown = getattr(provider, "shutdown", None)
        if callable(shutdown):
            try:
                shutdown()
            except Exception as exc:  # noqa: BLE001 - the demo is ending; say so and go on
                print(f"shutdown: {type(exc).__name__}", file=sys.stderr)
