"""Take the docs' Phoenix screenshot: the demo's retrieval span, scored, with its annotation chip.

Starts Phoenix from ``.venv-phoenix`` and the loopback ``JudgeServer`` (an LLM judge through litellm, so the
annotations are ``LLM``-kind and Phoenix fills in its retrieval metrics), runs ``cp-observe demo`` with
``CP_OBSERVE_PHOENIX_URL`` set, then opens Phoenix's span page in headless Chromium. Loopback only.

    .venv/bin/python scripts/phoenix_screenshot.py [docs/phoenix-retrieval-span.png]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cp_observe import _names as n  # noqa: E402 - after the path set-up
from cp_observe.testing import JudgeServer  # noqa: E402
from tests.phoenix_support import phoenix_server  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
WINDOW = "1400,900"
PROJECT = "cp-observe-demo"


def main() -> int:
    """Run the demo into a fresh Phoenix and screenshot one scored retrieval span."""
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs" / "phoenix-retrieval-span.png").resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work, phoenix_server(Path(work) / "phoenix") as phoenix:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_", "PHOENIX_"))}
        env.update({"CP_OBSERVE_PHOENIX_URL": phoenix.url, "CP_OBSERVE_JUDGE_API_KEY": "sk-local",
                    "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}",
                    "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
        with JudgeServer() as judge:
            subprocess.run([sys.executable, "-m", "cp_observe.cli", "demo", "--otlp", phoenix.url, "--judge",
                            "openai/gpt-4o-mini", "--judge-api-base", judge.url, "--turns", "3", "--quiet"],
                           cwd=ROOT, env=env, check=True, timeout=240)
        spans = phoenix.wait_for_spans(PROJECT, lambda got: any(s["name"] == n.EVALUATION_SPAN_NAME for s in got))
        span_id = next(s["parent_id"] for s in spans if s["name"] == n.EVALUATION_SPAN_NAME)
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", "--hide-scrollbars",
                 "--virtual-time-budget=20000", f"--window-size={WINDOW}", f"--screenshot={out}",
                 f"{phoenix.url}/redirects/spans/{span_id}"],
                check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
    print(f"wrote {out} ({out.stat().st_size} bytes), span {span_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
