"""What the benchmarks share: the payload, in-process sinks, a judge that answers at once, statistics, tables.

Nothing here reaches the network: ``block_network()`` refuses (and counts) every connection and name lookup
that is not loopback, so a peer that tries to phone home shows up as a number instead of a silent delay.
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = [
    "AGENT_SHAPES",
    "ANSWER",
    "CONTEXTS",
    "DOCS",
    "IDS",
    "METADATA",
    "QUERY",
    "RETRIEVE_SHAPES",
    "SCORES",
    "BlockedNetwork",
    "InstantJudge",
    "ListExporter",
    "ListSink",
    "agent_payload",
    "block_network",
    "cp_providers",
    "judge_server_process",
    "machine_line",
    "markdown_table",
    "median",
    "offline_env",
    "percentile",
    "retrieve_payload",
    "rss_mib",
    "use_cp_provider",
]

# --- the payload ----------------------------------------------------------------------------------------------

QUERY = "How long are backups kept after a customer deletes their account, and can they be restored?"

_WORDS = (
    "backup", "retention", "policy", "account", "deletion", "restore", "window", "encrypted", "snapshot",
    "region", "storage", "customer", "request", "support", "ticket", "thirty", "days", "audit",
    "log", "replica", "archive", "compliance", "export", "billing", "invoice", "workspace", "member",
    "administrator", "profile", "reset", "schedule", "weekly", "device", "quota", "limit",
)


def _context(seed: int, chars: int = 500) -> str:
    """A deterministic English-looking passage of exactly ``chars`` characters."""
    words: list[str] = []
    state = seed * 7919 + 17
    length = 0
    while length < chars + 20:
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF
        word = _WORDS[state % len(_WORDS)]
        words.append(word)
        length += len(word) + 1
    text = " ".join(words)
    return (text[: chars - 1] + ".")[:chars]


def make_contexts(count: int, chars: int = 500) -> list[str]:
    """``count`` distinct passages of ``chars`` characters each."""
    return [_context(i + 1, chars) for i in range(count)]


#: Five contexts of 500 characters: what every hot-path variant returns.
CONTEXTS: list[str] = make_contexts(5)
#: Each context's 3-key metadata, the same in every document shape.
METADATA: list[dict[str, Any]] = [
    {"source": f"kb/doc-{i}.md", "page": i, "section": "retention"} for i in range(len(CONTEXTS))
]
#: Each context's id and score, in the shapes that carry them (LlamaIndex, Haystack).
IDS: list[str] = [f"doc-{i}" for i in range(len(CONTEXTS))]
SCORES: list[float] = [0.9375 - 0.0625 * i for i in range(len(CONTEXTS))]  # exact in binary, easy to spot
#: The same contexts as LangChain-style dicts with ``page_content`` and ``metadata``.
DOCS: list[dict[str, Any]] = [
    {"page_content": text, "metadata": meta} for text, meta in zip(CONTEXTS, METADATA, strict=True)
]
#: The retriever return shapes of the hot-path benchmark, in table order.
RETRIEVE_SHAPES: tuple[str, ...] = ("str", "dict", "langchain", "llamaindex", "haystack")


def retrieve_payload(shape: str) -> list[Any]:
    """The five contexts as ``shape`` returns them; the frameworks' real classes (``ImportError`` if missing).

    ``langchain``: ``langchain_core.documents.Document(page_content, metadata)``; ``llamaindex``:
    ``NodeWithScore(node=TextNode(text, id_, metadata), score)``; ``haystack``: ``haystack.Document(content,
    meta, score, id)``.
    """
    if shape == "str":
        return CONTEXTS
    if shape == "dict":
        return DOCS
    rows = list(zip(CONTEXTS, METADATA, IDS, SCORES, strict=True))
    if shape == "langchain":
        from langchain_core.documents import Document

        return [Document(page_content=text, metadata=meta) for text, meta, _, _ in rows]
    if shape == "llamaindex":
        from llama_index.core.schema import NodeWithScore, TextNode

        return [NodeWithScore(node=TextNode(text=text, id_=ident, metadata=meta), score=score)
                for text, meta, ident, score in rows]
    if shape == "haystack":
        from haystack import Document as HaystackDocument

        return [HaystackDocument(content=text, meta=meta, score=score, id=ident) for text, meta, ident, score in rows]
    raise ValueError(f"unknown retrieve shape {shape!r}")


#: The answer every agent variant gives, in each shape below.
ANSWER = "Backups are kept for thirty days after an account is deleted; support can restore them in that window."
#: The agent return shapes of the hot-path benchmark, in table order.
AGENT_SHAPES: tuple[str, ...] = ("str", "dict", "list", "chat")


def agent_payload(shape: str) -> Any:
    """The answer as ``shape`` returns it: a str, ``{"answer", "sources"}``, a list of str, chat messages."""
    if shape == "str":
        return ANSWER
    if shape == "dict":
        return {"answer": ANSWER, "sources": [meta["source"] for meta in METADATA]}
    if shape == "list":
        first, second = ANSWER.split("; ")
        return [first + ";", second]
    if shape == "chat":
        return [{"role": "user", "content": QUERY}, {"role": "assistant", "content": ANSWER}]
    raise ValueError(f"unknown agent shape {shape!r}")

# --- in-process sinks -----------------------------------------------------------------------------------------


class ListSink(SpanProcessor):
    """A span processor that appends every ended span to a list: the cheapest honest "export"."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        """Keep the span."""
        self.spans.append(span)

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing buffered."""
        return True

    def clear(self) -> int:
        """Forget the kept spans; returns how many there were."""
        count = len(self.spans)
        self.spans.clear()
        return count


class ListExporter(SpanExporter):
    """A span exporter that appends every exported span to a list (for pipelines that insist on an exporter)."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Keep the spans."""
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing buffered."""
        return True

    def clear(self) -> int:
        """Forget the kept spans; returns how many there were."""
        count = len(self.spans)
        self.spans.clear()
        return count


class InstantJudge:
    """A judge that answers every context "relevant" at once: the evaluator's own cost, no judging."""

    model = "instant"

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Any:
        """One "yes" per context."""
        from cp_observe import Judgement, Verdict

        return Judgement(verdicts=tuple(Verdict(i, True, "instant") for i in range(len(contexts))), model="instant")


def cp_providers() -> tuple[Any, Any, Any]:
    """A tracer, meter and logger provider with nothing attached: where evaluation output goes to be dropped."""
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk.metrics import MeterProvider

    return TracerProvider(), MeterProvider(), LoggerProvider()


def use_cp_provider(provider: Any, sample_rate: float) -> None:
    """Point cp_observe's decorators at ``provider`` with ``sample_rate`` (what ``configure()`` does, switchable).

    ``configure()`` is the public way, but it attaches a new processor each call; the benchmarks interleave
    variants with different providers in one process, so they swap the decorators' runtime directly.
    """
    from cp_observe._config import _runtime
    from cp_observe._config._sampling import TraceIdRatio

    _runtime.install(tracer_provider=provider, sampler=TraceIdRatio(sample_rate), configured=True)


# --- a loopback judge in its own process -------------------------------------------------------------------------

_SERVER_CHILD = r"""
import sys
from cp_observe.testing import JudgeServer
server = JudgeServer(latency=float(sys.argv[1])).start()
print(server.url, flush=True)
sys.stdin.read()  # serve until the parent closes our stdin
server.stop()
"""


@contextlib.contextmanager
def judge_server_process(latency_s: float) -> Iterator[str]:
    """A ``cp_observe.testing.JudgeServer`` with ``latency_s`` in a child process; yields its base URL.

    In its own process, the server's CPU time and GIL stay out of the figures measured in this one, as a
    remote judge's would.
    """
    child = subprocess.Popen([sys.executable, "-c", _SERVER_CHILD, repr(latency_s)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the judge server did not start (got {url!r})")
        yield url
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)


# --- keeping peers offline ------------------------------------------------------------------------------------


def offline_env() -> None:
    """Environment variables that turn off the peers' telemetry, update checks and remote fetches."""
    settings = {
        "DO_NOT_TRACK": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "TRACELOOP_TELEMETRY": "false",
        "TRACELOOP_METRICS_ENABLED": "false",
        "TRACELOOP_LOGGING_ENABLED": "false",
        "TRACELOOP_SUPPRESS_WARNINGS": "true",
        "LANGFUSE_PUBLIC_KEY": "pk-lf-bench",
        "LANGFUSE_SECRET_KEY": "sk-lf-bench",
        "LANGFUSE_BASE_URL": "http://127.0.0.1:9",
        "LANGFUSE_HOST": "http://127.0.0.1:9",
        "LOGFIRE_SEND_TO_LOGFIRE": "false",
        "LOGFIRE_CONSOLE": "false",
        "LOGFIRE_IGNORE_NO_CONFIG": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:9",
        "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING": "false",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "2",
        "HF_HUB_OFFLINE": "1",
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    for key, value in settings.items():
        os.environ.setdefault(key, value)


class BlockedNetwork:
    """Counts of refused non-loopback connections and name lookups, by host."""

    def __init__(self) -> None:
        self.attempts: dict[str, int] = {}
        self._lock = threading.Lock()  # guards attempts

    def record(self, host: str) -> None:
        with self._lock:
            self.attempts[host] = self.attempts.get(host, 0) + 1

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.attempts.values())


_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost", ""})


def _is_loopback(host: object) -> bool:
    if host is None:
        return True
    text = host.decode() if isinstance(host, bytes) else str(host)
    return text in _LOOPBACK_NAMES or text.startswith("127.")


def block_network() -> BlockedNetwork:
    """Refuse every non-loopback ``connect`` and name lookup in this process, and count them."""
    blocked = BlockedNetwork()
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def _check(address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else None
        if isinstance(address, tuple) and not _is_loopback(host):
            blocked.record(str(host))
            raise ConnectionRefusedError(f"benchmark: no network ({host})")

    def connect(self: socket.socket, address: Any) -> None:
        _check(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        _check(address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_loopback(host):
            blocked.record(str(host))
            raise socket.gaierror(socket.EAI_NONAME, f"benchmark: no network ({host})")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo
    return blocked


# --- statistics and output ------------------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    """The median, or NaN for no values."""
    data = list(values)
    return statistics.median(data) if data else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation, or NaN for no values."""
    if not values:
        return float("nan")
    data = sorted(values)
    if len(data) == 1:
        return data[0]
    position = (len(data) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


def rss_mib() -> float:
    """Resident set size of this process now, in MiB (from /proc; peak RSS where /proc is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def machine_line() -> str:
    """One line naming the machine the figures come from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()} on {platform.system()} "
        f"{platform.release()}, {sys.executable}"
    )


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table; numbers are printed as given (format them before)."""
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    lines.extend("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)
    return "\n".join(lines)


def timed(func: Callable[[], object]) -> tuple[float, object]:
    """Run ``func`` once; returns (seconds, its result)."""
    import time

    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result
