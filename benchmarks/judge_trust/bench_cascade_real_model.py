"""The lexical judge against the shipped real-model judge on the labelled cases of tests/data.

The cascade's gain rests on how well the cheap judge's per-retrieval score correlates with the LLM judge's.
``bench_cascade.py`` measures the lexical judge against the files' human labels; this measures it against the
real-model judge the project ships a test tier for: Gemma 3 270M (Q4_K_M) served by llama-cpp-python's
OpenAI-compatible server on loopback (``tests/integration/real_model_support.LlamaServer``, one thread), judged
by ``LLMJudge`` over real HTTP with the slow tier's configuration (``tests/integration/test_real_model.make_judge``:
the lean transport for ``openai/``, ``json_object`` with llama-cpp-python's ``schema`` extension, 160 tokens per
reply, one retry; ``reason_language="Japanese"`` for the Japanese file, as the tier's Japanese case has it).

Per file: the cases; the Pearson correlation of per-case AP between the lexical and the real-model judge (the
figure the cascade's interval depends on); their context-level agreement; each judge's AP correlation with the
labels; each MAP; and the cases the real-model judge failed (a ``JudgeError``): counted, and left out of the
paired figures, never scored as zero. Needs the real-model tier (``scripts/install-real-model.sh``), so it runs in
``.venv``, not ``.venv-bench``; from the repository root:

    nice .venv/bin/python benchmarks/judge_trust/bench_cascade_real_model.py [--limit N] [--out results.jsonl]
    .venv-bench/bin/python benchmarks/judge_trust/bench_cascade_real_model.py --from results.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import machine_line, markdown_table

from cp_observe import JudgeError
from cp_observe._judging._lexical import LexicalJudge
from cp_observe._judging._map import exact_average_precision

ROOT = Path(__file__).resolve().parents[2]
LANGUAGE = {"lexical_ja.jsonl": "Japanese"}


@dataclass
class FileResult:
    """Per case: the labels' AP, the lexical AP and verdicts, and the model's (``None`` when it failed)."""

    name: str
    labels: list[list[bool]] = field(default_factory=list)
    lexical: list[list[bool]] = field(default_factory=list)
    model: list[list[bool] | None] = field(default_factory=list)
    seconds: float = 0.0
    calls: int = 0


def _ap(verdicts: list[bool]) -> float:
    return float(exact_average_precision(verdicts))


def _corr(a: list[float], b: list[float]) -> str:
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return "n/a (constant)"
    return f"{statistics.correlation(a, b):.2f}"


def _agreement(a: list[list[bool]], b: list[list[bool]]) -> str:
    pairs = [(x, y) for va, vb in zip(a, b, strict=True) for x, y in zip(va, vb, strict=True)]
    return f"{sum(x == y for x, y in pairs) / len(pairs):.1%}" if pairs else "—"


def _relevant_share(verdicts: list[list[bool]]) -> str:
    flat = [v for case in verdicts for v in case]
    return f"{sum(flat) / len(flat):.0%}" if flat else "—"


def row(result: FileResult) -> list[object]:
    """The table row of one file; the paired figures over the cases the model judged."""
    ok = [i for i, m in enumerate(result.model) if m is not None]
    model = [result.model[i] or [] for i in ok]
    lexical = [result.lexical[i] for i in ok]
    labels = [result.labels[i] for i in ok]
    model_ap, lexical_ap, labels_ap = [_ap(v) for v in model], [_ap(v) for v in lexical], [_ap(v) for v in labels]
    all_lexical_ap = [_ap(v) for v in result.lexical]
    all_labels_ap = [_ap(v) for v in result.labels]
    return [
        result.name,
        len(result.labels),
        f"{len(result.labels) - len(ok)}",
        _corr(lexical_ap, model_ap),
        _agreement(lexical, model),
        _corr(all_lexical_ap, all_labels_ap),
        _corr(model_ap, labels_ap),
        _agreement(model, labels),
        f"{statistics.fmean(all_lexical_ap):.3f}",
        f"{statistics.fmean(model_ap):.3f}" if model_ap else "—",
        f"{statistics.fmean(labels_ap):.3f}" if labels_ap else "—",
        f"{statistics.fmean(all_labels_ap):.3f}",
        f"{result.seconds / 60:.1f} min, {result.calls} calls",
        " / ".join(_relevant_share(v) for v in (lexical, model, labels)),
    ]


HEADERS = [
    "file", "cases", "model failed", "AP corr lexical vs model", "context agreement lexical vs model",
    "AP corr lexical vs labels", "AP corr model vs labels", "context agreement model vs labels", "lexical MAP",
    "model MAP (judged cases)", "labels' MAP (judged cases)", "labels' MAP (all)", "model time",
    "contexts marked relevant (lexical / model / labels, judged cases)",
]  # fmt: skip


async def judge_file(path: Path, base_url: str, limit: int | None, out: Path | None) -> FileResult:
    """Judge every case of ``path`` with the lexical judge and the real-model judge, one case at a time."""
    from tests.integration.real_model_support import Case
    from tests.integration.test_real_model import make_judge

    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    cases = cases[:limit] if limit else cases
    result = FileResult(path.name)
    lexical = LexicalJudge()
    # One judge for the file, as a deployment has one: its verdict cache only helps a context judged twice.
    model = make_judge(base_url, Case(path.name, "", None, (), reason_language=LANGUAGE.get(path.name)))
    started = time.monotonic()
    for number, case in enumerate(cases, 1):
        result.labels.append([bool(v) for v in case["labels"]])
        # As the scorer does: with no answer, the contexts are judged against the query.
        reference = case["reference"] or case["query"]
        got = await lexical.judge(case["query"], reference, case["contexts"])
        result.lexical.append([v.relevant for v in got.verdicts])
        took = time.monotonic()
        calls = 0
        try:
            judged = await model.judge(case["query"], reference, case["contexts"])
        except JudgeError as exc:
            verdicts, outcome = None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
            calls = exc.calls
        else:
            verdicts = [v.relevant for v in judged.verdicts]
            outcome = "".join("Y" if v else "n" for v in verdicts)
            calls = judged.usage.calls
        seconds = time.monotonic() - took
        result.calls += calls
        result.model.append(verdicts)
        print(f"  {path.name} {number}/{len(cases)} {case['id']}: {seconds:5.1f}s {outcome} "
              f"(labels {''.join('Y' if v else 'n' for v in result.labels[-1])})", file=sys.stderr, flush=True)
        if out is not None:
            with out.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps({"file": path.name, "id": case["id"], "labels": result.labels[-1],
                                         "lexical": result.lexical[-1], "model": verdicts, "seconds": round(seconds, 2),
                                         "calls": calls}) + "\n")
    result.seconds = time.monotonic() - started
    return result


def from_file(path: Path) -> list[FileResult]:
    """The per-file results of a run's ``--out`` file (to print the table again without the model)."""
    results: dict[str, FileResult] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        case = json.loads(line)
        result = results.setdefault(case["file"], FileResult(case["file"]))
        result.labels.append(case["labels"])
        result.lexical.append(case["lexical"])
        result.model.append(case["model"])
        result.seconds += case["seconds"]
        result.calls += case["calls"]
    return [results[name] for name in sorted(results)]


def print_table(results: list[FileResult]) -> None:
    """The table, one row per file."""
    print()
    print("Lexical judge vs the real-model judge (Gemma 3 270M) on tests/data/lexical_*.jsonl, per-case AP; "
          "paired figures over the cases the model judged, failures counted:")
    print(markdown_table(HEADERS, [row(r) for r in results]))


def main() -> int:
    from tests.integration.real_model_support import LlamaServer, missing_modules, model_path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N cases of each file")
    parser.add_argument("--out", type=Path, default=None, help="append each case's verdicts to this JSON-lines file")
    parser.add_argument("--from", dest="source", type=Path, default=None,
                        help="print the table of an earlier run's --out file, without the model")
    args = parser.parse_args()
    if args.source is not None:
        print_table(from_file(args.source))
        return 0
    if missing := missing_modules():
        print(f"the real-model tier is not installed (scripts/install-real-model.sh); missing: {missing}",
              file=sys.stderr)
        return 2
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="bench-real-model-") as workdir:
        server = LlamaServer(model_path(), Path(workdir))
        server.start()
        print(f"llama_cpp.server (Gemma 3 270M Q4_K_M, 1 thread) ready in {server.startup_s:.1f}s")
        try:
            results = [asyncio.run(judge_file(path, server.url, args.limit, args.out))
                       for path in sorted((ROOT / "tests" / "data").glob("lexical_*.jsonl"))]
        finally:
            server.stop()
    print_table(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
