"""A process that judges in process on the lean path never imports litellm.

Each case runs in a fresh interpreter: ``configure()`` with an ``openai/`` judge pointed at a loopback
``JudgeServer``, one decorated retrieval scored through the processor, then the modules it loaded. The
control case forces the litellm fallback and must import it, so the check can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_SCORE_ONE = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
import cp_observe
from cp_observe.testing._judge_server import JudgeServer
with JudgeServer() as server:
    processor = cp_observe.configure("openai/gpt-4o-mini", judge_api_base=server.url, judge_api_key="sk-test-0000",
                                     judge_transport=sys.argv[1], sample_rate=1.0, tracer_provider=TracerProvider())
    @cp_observe.retriever(name="kb")
    def retrieve(query):
        return ["Refunds take five days.", "Offices close on holidays."]
    retrieve("How long do refunds take?")
    assert processor.force_flush(60_000)
    stats = processor.stats()
assert stats["scored"] == 1, stats
print(json.dumps({"path": processor.judge.path,
                  "litellm": sorted(m for m in sys.modules if m == "litellm" or m.startswith("litellm."))[:3]}))
"""


def _run(transport: str, *, local_cost_map: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_", "LITELLM_"))}
    if local_cost_map is not None:
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = local_cost_map
    done = subprocess.run([sys.executable, "-c", _SCORE_ONE, transport], capture_output=True, text=True, env=env,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


@pytest.mark.parametrize("local_cost_map", ["True", None], ids=["cost-map-env-true", "cost-map-env-unset"])
def test_lean_in_process_judging_imports_no_litellm(local_cost_map: str | None) -> None:
    """The price comes from litellm's table read as a file; no litellm module is loaded."""
    seen = _run("auto", local_cost_map=local_cost_map)
    assert seen == {"path": "lean", "litellm": []}


def test_the_forced_fallback_does_import_litellm() -> None:
    """The control: judge_transport=litellm loads litellm, so the check above can fail."""
    seen = _run("litellm", local_cost_map="True")
    assert seen["path"] == "litellm"
    assert seen["litellm"]
