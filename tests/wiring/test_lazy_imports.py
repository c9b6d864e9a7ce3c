"""What configure() leaves unimported when it attaches to the application's providers, and that the
moved imports still work where they are needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cp_observe._judging._identity import judge_identity
from cp_observe._judging._lexical import LexicalJudge
from cp_observe._judging._llm_judge import LLMJudge, _retry_after
from cp_observe._names import JUDGE_KIND_LEXICAL, JUDGE_KIND_LLM

_ATTACH = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
import cp_observe
processor = cp_observe.configure("openai/gpt-4o-mini", tracer_provider=TracerProvider(), queue_size="50")
assert processor is not None and processor.judge.model == "openai/gpt-4o-mini"
watched = ("pydantic", "pydantic_core", "litellm", "cp_observe._judging._lexical", "cp_observe._emission._quiet_export",
           "opentelemetry.exporter.otlp.proto.http.trace_exporter", "urllib.request", "email.utils")
print(json.dumps(sorted(name for name in watched if name in sys.modules)))
"""


def _fresh(code: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_"))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_attaching_imports_no_pydantic_litellm_lexical_judge_or_exporter() -> None:
    """import cp_observe + configure(tracer_provider=) in a fresh interpreter loads none of what it does not use."""
    assert _fresh(_ATTACH) == []


def test_creating_the_exporters_still_imports_them() -> None:
    """configure(otlp_endpoint=) without providers builds the OTLP exporters and their quiet wrappers."""
    code = _ATTACH.replace('tracer_provider=TracerProvider(), queue_size="50"',
                           'otlp_endpoint="http://127.0.0.1:9"')
    loaded = _fresh(code)
    assert "cp_observe._emission._quiet_export" in loaded
    assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in loaded
    assert "pydantic" not in loaded and "litellm" not in loaded


def test_judge_identity_still_knows_both_judges() -> None:
    """Looking the judge modules up instead of importing them still tells a lexical from an LLM judge."""
    assert judge_identity(LexicalJudge()).kind == JUDGE_KIND_LEXICAL
    assert judge_identity(LLMJudge("openai/gpt-4o-mini")).kind == JUDGE_KIND_LLM


class _Refusal(Exception):
    """A provider's 429 carrying its headers, as litellm raises it."""

    def __init__(self, retry_after: str) -> None:
        super().__init__("rate limited")
        self.headers = {"retry-after": retry_after}


@pytest.mark.parametrize(("value", "low", "high"), [("2.5", 2.5, 2.5), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0, 0.0)])
def test_retry_after_in_seconds_or_as_an_http_date(value: str, low: float, high: float) -> None:
    """Retry-After is read in seconds and, through the import moved into that branch, as an HTTP date."""
    waited = _retry_after(_Refusal(value))
    assert waited is not None and low <= waited <= high


def test_a_future_http_date_gives_the_seconds_until_it() -> None:
    """An HTTP date an hour ahead gives about 3600 seconds."""
    import email.utils
    import time

    ahead = email.utils.formatdate(time.time() + 3600, usegmt=True)
    waited = _retry_after(_Refusal(ahead))
    assert waited is not None and 3500 < waited <= 3600
