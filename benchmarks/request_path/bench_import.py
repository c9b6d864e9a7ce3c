"""Import cost: wall time and RSS added by ``import cp_observe`` against the OpenTelemetry SDK alone and the peers.

Each import runs in a fresh interpreter that has loaded only ``sys``,
``os`` and ``time`` before it; the child reports the time the import statement took (wall, and the process's
CPU time, steadier on a shared machine), its RSS before and
after (from /proc), how many modules it loaded and whether ``litellm`` got imported. Runs are interleaved
(every case once per round, shuffled), and the table shows medians. cp_observe is measured in the lean
project venv (``.venv``) and the peers in ``.venv-bench``; each is compared with the OpenTelemetry SDK
imported by the same interpreter.

The import case that matters is what a service pays to score: ``import cp_observe`` plus a ``configure()`` that
attaches to the tracer provider the application already made (an LLM judge named by its model string, no
exporter created), against ``import opentelemetry.sdk.trace`` plus that same provider. When ``configure()``
creates the providers and OTLP exporters itself (``otlp_endpoint=``), the exporters' own import cost is
reported on its own row. The children run without any ``OTEL_*`` or ``CP_OBSERVE_*`` variable.

``--baseline-tree DIR`` also measures the import bound's two rows with ``cp_observe`` imported from another
checkout ``DIR`` (e.g. ``git worktree add`` or ``git archive`` of the commit before a change), interleaved in the
same rounds, so a before/after pair shares the machine's load.

    .venv-bench/bin/python benchmarks/request_path/bench_import.py [--quick] [--main-only] [--baseline-tree DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _common and _peers
import _common as c

_ROOT = Path(__file__).resolve().parents[2]

#: What a service imports to decorate and score: the figure the ≤ 100 ms target is checked on.
_FULL_SETUP = "from cp_observe import agent, retriever, configure, ContextPrecisionProcessor, LLMJudge, LexicalJudge"
_BASELINE = "import opentelemetry.sdk.trace"
#: The processor emits metrics and log records too, so the full set-up also loads these SDKs.
_ALL_SIGNALS = "import opentelemetry.sdk.trace, opentelemetry.sdk.metrics, opentelemetry.sdk._logs"
#: The application made its tracer provider (in the baseline too, so only cp-observe's cost counts)...
_APP = "from opentelemetry.sdk.trace import TracerProvider; provider = TracerProvider()"
#: ... and cp-observe attaches to it: no exporter is created, the judge is an LLM named by its model string.
_ATTACH = _APP + "; import cp_observe; cp_observe.configure('openai/gpt-4o-mini', tracer_provider=provider)"
#: The import bound: what a service pays for ``import cp_observe`` + ``configure()`` over the two SDKs it already
#: loads (traces and metrics), the application's TracerProvider made in both, median of fresh interpreters.
_APP_METRICS = ("from opentelemetry.sdk.trace import TracerProvider; import opentelemetry.sdk.metrics; "
                "provider = TracerProvider()")
_ATTACH_METRICS = (_APP_METRICS + "; import cp_observe; "
                   "cp_observe.configure('openai/gpt-4o-mini', tracer_provider=provider)")
_BOUND_MS = 60
#: No provider in the application: configure() creates the providers and the OTLP/HTTP exporters itself.
_CREATE = ("import opentelemetry.sdk.trace; import cp_observe; "
           "cp_observe.configure('openai/gpt-4o-mini', otlp_endpoint='http://127.0.0.1:4318')")
#: The OTLP/HTTP exporters configure() creates, imported alone: their own cost, apart from cp-observe's.
_EXPORTERS = ("import opentelemetry.sdk.trace, opentelemetry.exporter.otlp.proto.http.trace_exporter, "
              "opentelemetry.exporter.otlp.proto.http.metric_exporter, "
              "opentelemetry.exporter.otlp.proto.http._log_exporter")
#: (label, import statement, venv): "main" is the lean project venv, "bench" the one with the peers.
CASES: tuple[tuple[str, str, str], ...] = (
    ("opentelemetry.sdk.trace (baseline)", _BASELINE, "main"),
    ("OTel SDK traces + metrics + logs", _ALL_SIGNALS, "main"),
    ("cp_observe (package only; names load lazily)", "import cp_observe", "main"),
    ("cp_observe decorators", "from cp_observe import agent, retriever", "main"),
    ("cp_observe full set-up", _FULL_SETUP, "main"),
    ("app: sdk.trace + its TracerProvider (attach baseline)", _APP, "main"),
    ("app + import cp_observe + configure(tracer_provider=)", _ATTACH, "main"),
    ("app: sdk.trace + sdk.metrics + its TracerProvider (bound baseline)", _APP_METRICS, "main"),
    ("app + sdk.metrics + import cp_observe + configure(tracer_provider=)", _ATTACH_METRICS, "main"),
    ("OTLP/HTTP exporters alone (their own cost)", _EXPORTERS, "main"),
    ("import cp_observe + configure(otlp_endpoint=)", _CREATE, "main"),
    ("opentelemetry.sdk.trace (baseline)", _BASELINE, "bench"),
    ("cp_observe full set-up, peers installed", _FULL_SETUP, "bench"),
    ("openinference.instrumentation", "import openinference.instrumentation", "bench"),
    ("traceloop.sdk", "import traceloop.sdk", "bench"),
    ("langfuse", "import langfuse", "bench"),
    ("logfire", "import logfire", "bench"),
    ("mlflow (mlflow-tracing)", "import mlflow", "bench"),
    ("litellm (for scale)", "import litellm", "bench"),
)
_NOTES = {
    ("app + import cp_observe + configure(tracer_provider=)", "main"): "vs OTel SDK columns: vs the app row above",
    ("app + sdk.metrics + import cp_observe + configure(tracer_provider=)", "main"):
        "vs OTel SDK columns: vs the bound baseline row above",
}
#: A case compared with another case than the OTel SDK baseline of its venv.
_COMPARED_WITH = {_ATTACH: _APP, _ATTACH_METRICS: _APP_METRICS}

_CHILD = r"""
import os, sys, time
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
before_modules = len(sys.modules)
rss0 = rss()
t0 = time.perf_counter()
c0 = time.process_time()
try:
    exec(sys.argv[1])
    error = None
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
t1 = time.perf_counter()
c1 = time.process_time()
rss1 = rss()
import json
print(json.dumps({"seconds": t1 - t0, "cpu": c1 - c0, "rss": rss1 - rss0, "modules": len(sys.modules) - before_modules,
                  "litellm": "litellm" in sys.modules, "pydantic": "pydantic" in sys.modules, "error": error}))
"""

#: With PYTHONDONTWRITEBYTECODE no import writes a .pyc, so the package is compiled once, before any run.
_COMPILE = "import compileall, os, cp_observe; compileall.compile_dir(os.path.dirname(cp_observe.__file__), quiet=1)"


@dataclass
class Case:
    """One import statement and what its runs measured."""

    label: str
    statement: str
    venv: str
    python: str
    pythonpath: str | None = None  # a checkout whose cp_observe the child imports instead (--baseline-tree)
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    modules: list[int] = field(default_factory=list)
    litellm: list[bool] = field(default_factory=list)
    pydantic: list[bool] = field(default_factory=list)
    error: str | None = None


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env.setdefault("DO_NOT_TRACK", "1")
    for name in list(env):  # attach means no exporter: nothing in the environment may ask for one
        if name.startswith(("OTEL_", "CP_OBSERVE_")):
            del env[name]
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # every run reads the same .pyc files; none is written mid-benchmark
    return env


def _existing(python: str) -> str:
    return python if Path(python).exists() else sys.executable


def run_once(case: Case) -> None:
    """Import ``case.statement`` in a fresh interpreter and record what it cost."""
    env = _env()
    if case.pythonpath is not None:
        env["PYTHONPATH"] = case.pythonpath
    done = subprocess.run([case.python, "-c", _CHILD, case.statement], capture_output=True, text=True,
                          env=env, timeout=300, check=False, cwd=case.pythonpath)
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        case.error = (done.stderr.strip().splitlines() or ["no output"])[-1][:100]
        return
    if result["error"]:
        case.error = result["error"][:100]
        return
    case.seconds.append(result["seconds"])
    case.cpu.append(result["cpu"])
    case.rss.append(result["rss"] / (1024 * 1024))
    case.modules.append(result["modules"])
    case.litellm.append(result["litellm"])
    case.pydantic.append(result["pydantic"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 runs per case instead of 9")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--main-only", action="store_true", help="only the rows measured in the project venv")
    parser.add_argument("--baseline-tree", default=None,
                        help="another checkout: the bound's rows again with its cp_observe, interleaved")
    parser.add_argument("--main-python", default=str(_ROOT / ".venv" / "bin" / "python"),
                        help="the lean project venv's interpreter (cp_observe rows)")
    parser.add_argument("--bench-python", default=str(_ROOT / ".venv-bench" / "bin" / "python"),
                        help="the interpreter with the peers installed")
    args = parser.parse_args(argv)
    runs = args.runs or (3 if args.quick else 9)
    pythons = {"main": _existing(args.main_python), "bench": _existing(args.bench_python)}
    cases = [Case(label, statement, venv, pythons[venv]) for label, statement, venv in CASES
             if venv == "main" or not args.main_only]
    if args.baseline_tree:
        tree = str(Path(args.baseline_tree).resolve())
        cases += [Case(f"{label} [baseline tree]", statement, "main", pythons["main"], tree)
                  for label, statement, venv in CASES if statement in (_APP_METRICS, _ATTACH_METRICS)]
    for python, pythonpath in {(case.python, case.pythonpath) for case in cases}:  # bytecode for every module
        env = _env() if pythonpath is None else {**_env(), "PYTHONPATH": pythonpath}
        subprocess.run([python, "-c", _COMPILE], env=env, capture_output=True, timeout=600, check=False,
                       cwd=pythonpath)
    for case in cases:  # warm the page cache (and any first-run work) once, unrecorded
        run_once(case)
        for runs_of in (case.seconds, case.cpu, case.rss, case.modules, case.litellm, case.pydantic):
            runs_of.clear()
    rng = random.Random(7)
    for done in range(runs):
        order = [case for case in cases if case.error is None]
        rng.shuffle(order)
        for case in order:
            run_once(case)
        print(f"  run {done + 1}/{runs} done", file=sys.stderr, flush=True)

    bases = {case.venv: case for case in cases if case.statement == _BASELINE}
    rows = []
    for case in cases:
        if case.error is not None or not case.seconds:
            rows.append([case.label, case.venv, *["n/a"] * 8, case.error or "no result"])
            continue
        compared = _COMPARED_WITH.get(case.statement)
        base = bases[case.venv] if compared is None else next(
            b for b in cases if b.statement == compared and b.pythonpath == case.pythonpath)
        base_s, base_rss = c.median(base.seconds), c.median(base.rss)
        seconds, rss = c.median(case.seconds), c.median(case.rss)
        rows.append([
            case.label,
            case.venv,
            f"{seconds * 1000:.0f}",
            f"{(seconds - base_s) * 1000:+.0f}",
            f"{c.median(case.cpu) * 1000:.0f}",
            f"{(c.median(case.cpu) - c.median(base.cpu)) * 1000:+.0f}",
            f"{rss:.1f}",
            f"{rss - base_rss:+.1f}",
            f"{int(c.median(case.modules))}",
            "yes" if any(case.litellm) else "no",
            "; ".join(filter(None, [_NOTES.get((case.label, case.venv), ""),
                                    "pydantic imported" if any(case.pydantic) else ""])),
        ])
    print(f"## Import cost (median of {runs} fresh interpreters each, interleaved)\n")
    print(f"Machine: {c.machine_line()}\n")
    print(c.markdown_table(
        ["import", "venv", "ms", "ms vs OTel SDK", "CPU ms", "CPU ms vs OTel SDK", "RSS MiB added",
         "MiB vs OTel SDK", "modules loaded",
         "litellm imported?", "note"], rows))
    cp = next(case for case in cases if case.statement == _FULL_SETUP)
    if cp.seconds and bases["main"].seconds:
        extra_ms = (c.median(cp.seconds) - c.median(bases["main"].seconds)) * 1000
        print("\n### Targets\n")
        print(f"- {'MET ' if extra_ms <= 100 else 'MISSED'} the full set-up import (`{_FULL_SETUP}`) adds "
              f"{extra_ms:.0f} ms over the OpenTelemetry SDK alone (target ≤ 100 ms)")
        signals = next(case for case in cases if case.statement == _ALL_SIGNALS)
        if signals.seconds:
            over = (c.median(cp.seconds) - c.median(signals.seconds)) * 1000
            print(f"- (for reference) the full set-up adds {over:.0f} ms over the OTel SDK for all three signals")
        decorators = next(case for case in cases if case.label == "cp_observe decorators")
        if decorators.seconds:
            over = (c.median(decorators.seconds) - c.median(bases["main"].seconds)) * 1000
            print(f"- {'MET ' if over <= 100 else 'MISSED'} the decorators alone add {over:.0f} ms over the OTel SDK")
        _attach_targets(cases)
        lite = [case.label for case in cases if case.label.startswith("cp_observe") and any(case.litellm)]
        print(f"- {'MISSED' if lite else 'MET '} litellm imported by a cp_observe import: "
              f"{', '.join(lite) if lite else 'no'}")
    return 0


def _attach_targets(cases: list[Case]) -> None:
    """What attaching cp_observe to an app's own SDK set-up costs, against its targets.

    The attach target (≤ +100 ms over the app's tracer provider), the import bound over the traces and metrics
    SDKs (this tree, then the baseline tree's same row), and what creating the providers and exporters costs,
    reported apart.
    """
    found = {case.statement: case for case in cases if case.seconds and case.pythonpath is None}
    tree = {case.statement: case for case in cases if case.seconds and case.pythonpath is not None}
    if _APP in found and _ATTACH in found:
        attach_ms = (c.median(found[_ATTACH].seconds) - c.median(found[_APP].seconds)) * 1000
        attach_cpu = (c.median(found[_ATTACH].cpu) - c.median(found[_APP].cpu)) * 1000
        print(f"- {'MET ' if attach_ms <= 100 else 'MISSED'} `import cp_observe` + `configure(tracer_provider=)` "
              f"adds {attach_ms:.0f} ms ({attach_cpu:.0f} ms CPU) over `import opentelemetry.sdk.trace` + the app's "
              "TracerProvider (target ≤ 100 ms)")
    if _APP_METRICS in found and _ATTACH_METRICS in found:
        bound_ms = (c.median(found[_ATTACH_METRICS].seconds) - c.median(found[_APP_METRICS].seconds)) * 1000
        bound_cpu = (c.median(found[_ATTACH_METRICS].cpu) - c.median(found[_APP_METRICS].cpu)) * 1000
        print(f"- {'MET ' if bound_ms <= _BOUND_MS else 'MISSED'} `import cp_observe` + `configure(tracer_provider=)` "
              f"adds {bound_ms:.0f} ms ({bound_cpu:.0f} ms CPU) over `opentelemetry.sdk.trace` + "
              f"`opentelemetry.sdk.metrics` + the app's TracerProvider (bound ≤ {_BOUND_MS} ms)")
    if _APP_METRICS in tree and _ATTACH_METRICS in tree:
        bound_ms = (c.median(tree[_ATTACH_METRICS].seconds) - c.median(tree[_APP_METRICS].seconds)) * 1000
        bound_cpu = (c.median(tree[_ATTACH_METRICS].cpu) - c.median(tree[_APP_METRICS].cpu)) * 1000
        print(f"- (the baseline tree, same rounds) the same bound row adds {bound_ms:.0f} ms ({bound_cpu:.0f} ms CPU)")
    if _BASELINE in found and _CREATE in found and _EXPORTERS in found:
        base = c.median(found[_BASELINE].seconds)
        create_ms = (c.median(found[_CREATE].seconds) - base) * 1000
        exporters_ms = (c.median(found[_EXPORTERS].seconds) - base) * 1000
        print(f"- (reported apart) `configure(otlp_endpoint=)` creating the providers and exporters adds "
              f"{create_ms:.0f} ms over the OTel SDK, of which the OTLP/HTTP exporters' own imports are "
              f"{exporters_ms:.0f} ms")


if __name__ == "__main__":
    sys.exit(main())
