"""replay --batch against loopback batch APIs: same scores as a synchronous replay, resume, failures, refusals."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from cp_observe._errors import ConfigurationError
from cp_observe.replay import ReplayOptions, TraceFile, replay
from cp_observe.replay._batched import BatchOptions, batch_replay, report_lines
from cp_observe.replay._progress import Progress
from cp_observe.testing import JudgeServer
from tests.batch_support import BatchServer
from tests.replay_support import Exported, evaluations, export_demo

PROVIDERS = {
    "openai": ("openai/gpt-4o-mini", lambda url: url + "/v1", {"OPENAI_API_KEY": "sk-test-batch-key"}),
    "azure": ("azure/gpt-4o-mini", lambda url: url, {"AZURE_API_KEY": "azure-test-key", "AZURE_API_VERSION": "2024-10-21"}),
    "anthropic": ("anthropic/claude-haiku-4-5", lambda url: url, {"ANTHROPIC_API_KEY": "sk-ant-test"}),
    "gemini": ("gemini/gemini-2.5-flash", lambda url: url, {"GEMINI_API_KEY": "gemini-test-key"}),
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The demo run live at rate 1, its traces written as a Collector file."""
    return export_demo(tmp_path_factory.mktemp("batch-demo"), 1.0, turns=24)


def _batch(demo: Exported, out: Path, judge: str, base: str, **batch: Any) -> tuple[Any, Any, str]:
    stream = io.StringIO()
    options = ReplayOptions(judge=judge, judge_api_base=base, output=out)
    result, report = batch_replay([TraceFile(demo.jsonl)], options, BatchOptions(poll_s=0.01, **batch),
                                  progress=Progress(enabled=False), stream=stream)
    return result, report, stream.getvalue()


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_batch_replay_scores_as_the_synchronous_replay(name: str, demo: Exported, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every provider: the batch run's evaluations equal a synchronous replay's on the same input, digit for digit."""
    judge, base_of, env = PROVIDERS[name]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CP_OBSERVE_AZURE_BATCH_DEPLOYMENT", "judge-global-batch")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-sync-key")
    with JudgeServer() as sync_server:
        sync_out = tmp_path / "sync.jsonl"
        replay([TraceFile(demo.jsonl)], ReplayOptions(judge="openai/gpt-4o-mini", judge_api_base=sync_server.url,
                                                     output=sync_out), progress=Progress(enabled=False))
    with BatchServer(polls_to_end=2) as server:
        out = tmp_path / "batch.jsonl"
        result, report, progress = _batch(demo, out, judge, base_of(server.url),
                                          azure_deployment="judge-global-batch" if name == "azure" else None)
        assert server.created == 1
    synchronous, batched = evaluations(sync_out), evaluations(out)
    assert batched and batched == synchronous
    assert result.stats["scored"] == len(demo.live)
    assert report.corrective_calls == 0 and report.failed_requests == 0
    assert report.answered >= report.requests > 0
    assert "in progress" in progress and "done" in progress
    assert report.batch_usd is not None and report.standard_usd is not None
    assert report.batch_usd == pytest.approx(report.standard_usd / 2)


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_misaligned_reply_gets_the_synchronous_corrective_call(name: str, demo: Exported, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch reply that fails alignment is followed by the synchronous corrective call, counted apart."""
    judge, base_of, env = PROVIDERS[name]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with BatchServer(misalign=lambda user: "CONTEXT 0 OF" in user) as server:
        result, report, _ = _batch(demo, tmp_path / "out.jsonl", judge, base_of(server.url),
                                   azure_deployment="judge-global-batch")
    assert report.corrective_calls > 0 and server.sync_calls == report.corrective_calls
    assert report.corrective_usd is not None and report.corrective_usd > 0
    assert result.stats["scored"] == len(demo.live)


def test_partial_failure_is_listed_and_retried(demo: Exported, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed requests: their evaluations count failed, failed.jsonl lists them, --batch-retry-failed resubmits."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    flaky = {"on": True}
    out = tmp_path / "out.jsonl"
    with BatchServer(fail=lambda user: flaky["on"] and "hours" in user.lower()) as server:
        result, report, _ = _batch(demo, out, "anthropic/claude-haiku-4-5", server.url)
        assert report.failed_requests > 0
        listed = [json.loads(line) for line in Path(report.failed_list).read_text().splitlines()]
        assert len(listed) == report.failed_requests and all(item["error"] for item in listed)
        assert result.stats["failed"] > 0
        assert result.stats["scored"] + result.stats["failed"] == len(demo.live)
        summary = "\n".join(report_lines(report))
        assert "--batch-retry-failed" in summary and listed[0]["custom_id"][:16] in summary
        flaky["on"] = False
        again, second, _ = _batch(demo, out, "anthropic/claude-haiku-4-5", server.url, retry_failed=True)
        assert server.created == 2 and second.submitted_now == report.failed_requests
    assert second.failed_requests == 0 and again.stats["scored"] == len(demo.live)


def test_expired_batch_lists_the_unanswered(demo: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An expired batch: the answered half is scored, the rest listed as failed with the batch's state."""
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")
    with BatchServer(expire=True) as server:
        result, report, _ = _batch(demo, tmp_path / "out.jsonl", "gemini/gemini-2.5-flash", server.url)
    assert 0 < report.failed_requests < report.requests
    assert "EXPIRED" in Path(report.failed_list).read_text()
    assert result.stats["failed"] > 0 and result.stats["scored"] > 0


def test_no_wait_then_resume_submits_nothing_again(demo: Exported, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """--batch-no-wait stops with the batch open; run again, it resumes that batch instead of submitting."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-batch-key")
    out = tmp_path / "out.jsonl"
    with BatchServer(polls_to_end=3) as server:
        first, report, _ = _batch(demo, out, "openai/gpt-4o-mini", server.url + "/v1", wait=False)
        assert first is None and not report.complete and server.created == 1
        second, resumed, _ = _batch(demo, out, "openai/gpt-4o-mini", server.url + "/v1")
        assert server.created == 1 and resumed.resumed and resumed.submitted_now == 0
    assert second.stats["scored"] == len(demo.live)


def test_split_at_the_provider_limit(demo: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More requests than one batch may hold: several batches, every request in exactly one."""
    from cp_observe._batch import _openai

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-batch-key")
    monkeypatch.setattr(_openai.OpenAIBatches, "max_requests", 5)
    with BatchServer() as server:
        result, report, _ = _batch(demo, tmp_path / "out.jsonl", "openai/gpt-4o-mini", server.url + "/v1")
        held = [cid for batch in server.batches.values() for cid, _ in batch.items]
    assert server.created == -(-report.requests // 5)
    assert len(held) == len(set(held)) == report.requests
    assert result.stats["scored"] == len(demo.live)


def test_budget_is_checked_at_submission(demo: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--budget-usd below the batch estimate: refused before anything is submitted."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-batch-key")
    with BatchServer() as server:
        options = ReplayOptions(judge="openai/gpt-4o-mini", judge_api_base=server.url + "/v1",
                                output=tmp_path / "out.jsonl", budget_usd=1e-6)
        with pytest.raises(ConfigurationError, match="batch price; nothing was submitted"):
            batch_replay([TraceFile(demo.jsonl)], options, BatchOptions(poll_s=0.01), progress=Progress(enabled=False),
                         stream=io.StringIO())
        assert server.created == 0


def test_other_providers_refuse_batch(demo: Exported, tmp_path: Path) -> None:
    """A judge without a batch API refuses --batch naming the providers that have one."""
    options = ReplayOptions(judge="ollama/llama3.1", output=tmp_path / "out.jsonl")
    with pytest.raises(ConfigurationError, match="openai/, azure/, anthropic/, gemini/"):
        batch_replay([TraceFile(demo.jsonl)], options, BatchOptions(), progress=Progress(enabled=False))


def test_a_run_stopped_between_split_batches_submits_only_the_rest(demo: Exported, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider refuses the third create: the run stops with two batches saved; the rerun submits the rest."""
    from cp_observe._batch import _anthropic
    from cp_observe._batch._http import BatchApiError

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setattr(_anthropic.AnthropicBatches, "max_requests", 4)
    out = tmp_path / "out.jsonl"
    with BatchServer(creates_allowed=2) as server:
        with pytest.raises(BatchApiError, match="HTTP 500"):
            _batch(demo, out, "anthropic/claude-haiku-4-5", server.url)
        assert server.created == 2
        first_two = {cid for batch in server.batches.values() for cid, _ in batch.items}
        server.creates_allowed = None
        result, report, _ = _batch(demo, out, "anthropic/claude-haiku-4-5", server.url)
        later = [cid for batch in list(server.batches.values())[2:] for cid, _ in batch.items]
    assert report.resumed and report.submitted_now == report.requests - len(first_two) == len(later)
    assert not first_two & set(later)
    assert result.stats["scored"] == len(demo.live)
