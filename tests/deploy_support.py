"""Helpers for the deploy tests: shipped file paths, the OTel -> Prometheus name rules, PromQL scanning, promtool.

The expected Prometheus series are derived from ``cp_observe._names`` (the one module that spells metric and
attribute names) and the OpenTelemetry -> Prometheus translation rules that both the collector's ``prometheus``
exporter (``translation_strategy: UnderscoreEscapingWithSuffixes``, via github.com/prometheus/otlptranslator)
and the Python ``opentelemetry-exporter-prometheus`` apply.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cp_observe import _names as names

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
COLLECTORS = REPO / "collectors"
PROMETHEUS_DIR = DEPLOY / "prometheus"
RULES_FILE = PROMETHEUS_DIR / "rules" / "context_precision.rules.yml"
#: The canary rules, generated for the segment label retriever_version (deploy/prometheus/canary_rules.py).
CANARY_RULES_FILE = PROMETHEUS_DIR / "rules" / "context_precision_canary.rules.yml"
#: The documented segment the shipped canary rules are generated for (its label: retriever_version).
CANARY_SEGMENT = "retriever.version"
RULE_TESTS_DIR = PROMETHEUS_DIR / "tests"
DASHBOARD_FILE = DEPLOY / "grafana" / "dashboards" / "context-precision.json"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
K8S_DIR = DEPLOY / "k8s"

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")

#: Apply to tests that run promtool: they skip (with the reason shown by ``-ra``) where it is not installed.
needs_promtool = [
    pytest.mark.prometheus,
    pytest.mark.skipif(
        PROMTOOL is None, reason="promtool not installed (scripts/install-system-deps.sh installs Debian's prometheus)"
    ),
]

#: The alert names and rule groups are a stable interface; deploy/README.md documents them.
ALERT_NAMES = (
    "ContextPrecisionMAPDrop",
    "ContextPrecisionMAPRegression",
    "ContextPrecisionLowVolume",
    "ContextPrecisionJudgeFailing",
    "ContextPrecisionEvaluationsDropped",
    "ContextPrecisionJudgeAgreementLow",
    "ContextPrecisionTracesSplit",
)
RULE_GROUPS = ("context_precision.recording", "context_precision.alerts", "context_precision.routing")
#: The canary rules' alert (its own file, generated per segment label) and groups.
CANARY_ALERT_NAMES = ("ContextPrecisionVariantRegression",)
CANARY_RULE_GROUPS = ("context_precision.canary.recording", "context_precision.canary.alerts")
#: A series the canary alert reads that the user records (the baseline MAP per data source and stage), unless the
#: rules were generated with --baseline, which records it as a constant.
CANARY_BASELINE_SERIES = "gen_ai_data_source_id_stage:context_precision_score:canary_baseline"

# --- OpenTelemetry -> Prometheus names --------------------------------------------------------------------------------

#: The subset of the translators' unit map that matters here (otlptranslator unitMap / Python _UNIT_MAPPINGS).
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": "", "%": "percent"}


@dataclass(frozen=True)
class Instrument:
    """One metric instrument as the library really creates it, read back from an in-memory reader."""

    name: str
    kind: str
    unit: str
    attributes: frozenset[str]


@functools.lru_cache(maxsize=1)
def library_instruments() -> tuple[Instrument, ...]:
    """Drive cp-observe's metric emitter once per outcome and read back every instrument it records.

    The emitter is the one place the library creates its instruments, so this is the truth about names,
    kinds, units and attribute keys (the OpenTelemetry SDK's in-memory reader, no exporter).
    """
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import Gauge, Histogram, InMemoryMetricReader, Sum
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import SpanContext, TraceFlags

    from cp_observe import _internal
    from cp_observe._config._settings import Settings
    from cp_observe._emission._emit import Emitter, Target
    from cp_observe._types import RerankLift, ScoreResult, Usage, Verdict

    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    emitter = Emitter(
        tracer_provider=TracerProvider(),
        meter_provider=meter_provider,
        logger_provider=LoggerProvider(),
        queue_depth=lambda: 1,
        options=Settings(capture_content=False, segments=CANARY_SEGMENT, max_segment_values=1),
    )
    # The shipped canary rules' label.
    assert emitter.segments is not None and emitter.segments.labels[0][1] == prometheus_label(CANARY_SEGMENT)
    assert emitter.segments is not None
    emitter.segments.resolve({CANARY_SEGMENT: "v1"}, None)
    segments = emitter.segments.resolve({CANARY_SEGMENT: "v2"}, None)  # over the bound: 'other', and counted
    target = Target(
        span_context=SpanContext(trace_id=1, span_id=2, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)),
        data_source="docs",
        agent_name="helper",
        reference=names.REFERENCE_OUTPUT,
        sampling_reason="ratio",
        segments=segments,
    )
    result = ScoreResult(
        score=0.5,
        reason="",
        verdicts=(Verdict(0, False), Verdict(1, True)),
        average_precision=0.5,
        judge_model="judge",
        reference="output",
        usage=Usage(calls=1, prompt_tokens=10, completion_tokens=5),
        cost_usd=0.001,
    )
    emitter.count_sampled(Emitter.labels(target))
    emitter.scored(target, result, start_ns=0, end_ns=1_000_000_000, model="judge")
    # The cheap-plus-LLM cascade's evaluation: both scores, so its PPI sums are recorded too.
    from cp_observe._types import CascadeResult

    emitter.scored(target, result, start_ns=0, end_ns=1_000_000_000, model="judge",
                   cascade=CascadeResult(cheap=result, llm=result, llm_status=names.CASCADE_LLM_JUDGED))
    emitter.failed(target, RuntimeError("boom"), "judge_error", start_ns=0, end_ns=1_000_000_000, model="judge")
    emitter.count_split()  # a trace whose spans came more than turn_timeout_s apart (serve's replicas)
    # A reranker's evaluation (stage=rerank) also records the lift.
    reranked = dataclasses.replace(target, stage=names.STAGE_RERANK)
    emitter.scored(reranked, dataclasses.replace(result, rerank=RerankLift(0.25, 0.25, 1)), start_ns=0,
                   end_ns=1_000_000_000, model="judge")
    # The internal-errors counter reports what the error boundary counted: count one, so it has a point.
    _internal.report_user_error("deploy_support", ValueError("one counted failure"))
    # The judge-agreement gauges are recorded by `cp-observe calibrate --push`, not the emitter: record one group.
    from cp_observe._judging._labels import HumanLabel
    from cp_observe.calibrate._calibrate import calibrate
    from cp_observe.calibrate._judged import JudgedRetrieval, JudgeKey
    from cp_observe.calibrate._push import record_agreement

    judged = JudgedRetrieval(trace_id=1, span_id=2, data_source="docs", judge=JudgeKey("judge", "cp-2", "llm"),
                             verdicts=(True, False))
    record_agreement(meter_provider, calibrate([judged], [HumanLabel(1, 2, True, position=0)]).groups)
    found = []
    data = reader.get_metrics_data()
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if isinstance(metric.data, Histogram):
                    kind = "histogram"
                elif isinstance(metric.data, Sum):
                    kind = "counter" if metric.data.is_monotonic else "updowncounter"
                elif isinstance(metric.data, Gauge):
                    kind = "gauge"
                else:  # pragma: no cover - the library emits no other point kinds
                    raise AssertionError(f"unexpected metric data {metric.data!r}")
                keys = frozenset(k for point in metric.data.data_points for k in (point.attributes or {}))
                found.append(Instrument(metric.name, kind, metric.unit or "", keys))
    return tuple(sorted(found, key=lambda i: i.name))


#: Labels Prometheus itself or the exporters add: histogram buckets, target labels, ALERTS' own labels.
SYSTEM_LABELS = frozenset({"le", "job", "instance", "alertname", "alertstate", "otel_scope_name"})
#: Series Prometheus synthesises.
SYSTEM_SERIES = frozenset({"ALERTS", "ALERTS_FOR_STATE", "up"})


def prometheus_name(otel_name: str) -> str:
    """Escape an OTel metric or attribute name the way UnderscoreEscaping does (every run of invalid chars -> _)."""
    return re.sub(r"[^a-zA-Z0-9:]+", "_", otel_name).strip("_")


def prometheus_label(attribute: str) -> str:
    """Escape an OTel attribute key into a Prometheus label name (":" is not allowed in labels)."""
    return re.sub(r"[^a-zA-Z0-9]+", "_", attribute).strip("_")


def prometheus_series(otel_name: str, kind: str, unit: str) -> frozenset[str]:
    """Return the series names one instrument becomes with unit and type suffixes on."""
    base = prometheus_name(otel_name)
    unit_word = _UNIT_WORDS.get(unit, unit) if not re.fullmatch(r"\{.*\}", unit) else ""
    unit_word = prometheus_name(unit_word)
    if unit_word and not base.endswith("_" + unit_word):
        base = f"{base}_{unit_word}"
    if kind == "counter":
        return frozenset({base if base.endswith("_total") else base + "_total"})
    if kind == "histogram":
        return frozenset({f"{base}_bucket", f"{base}_sum", f"{base}_count"})
    if kind in ("gauge", "updowncounter"):
        return frozenset({base})
    raise ValueError(f"unknown instrument kind {kind!r}")


def actual_series() -> dict[str, frozenset[str]]:
    """Map each OTel metric name the library records to the Prometheus series it becomes."""
    return {i.name: prometheus_series(i.name, i.kind, i.unit) for i in library_instruments()}


def emitted_series() -> frozenset[str]:
    """Every Prometheus series name cp-observe documents in cp_observe._names (the contract configs follow)."""
    return frozenset().union(*documented_series().values())


def emitted_labels() -> frozenset[str]:
    """Every Prometheus label a cp-observe series carries (as recorded by the library), plus system labels."""
    recorded = frozenset().union(*(i.attributes for i in library_instruments()))
    return frozenset(prometheus_label(a) for a in recorded) | SYSTEM_LABELS


def documented_series() -> dict[str, frozenset[str]]:
    """Map each METRIC_* constant's value to the series its ``#: ... -> series`` comment in _names.py names."""
    source = Path(names.__file__).read_text(encoding="utf-8")
    found: dict[str, frozenset[str]] = {}
    for comment, const in re.findall(r"^#:(.*)\n(METRIC_[A-Z_]+):", source, flags=re.MULTILINE):
        target = comment.rsplit("->", 1)[-1].strip()
        if m := re.fullmatch(r"(\w+?)_?\{([\w,]+)\}", target):
            series = frozenset(f"{m.group(1)}_{part}" for part in m.group(2).split(","))
        elif target.endswith("_*"):
            series = frozenset(f"{target[:-2]}_{part}" for part in ("bucket", "sum", "count"))
        else:
            series = frozenset({target})
        found[getattr(names, const)] = series
    return found


# --- PromQL scanning --------------------------------------------------------------------------------------------------

_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
    | {"inf", "nan", "atan2"}
)
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")


def scan_promql(expr: str) -> tuple[frozenset[str], frozenset[str]]:
    """Return (metric names, label names) an expression refers to.

    A scanner, not a parser: promtool does the parsing; this only has to find identifiers reliably in the
    expressions we write (selectors, aggregations with by/without, binary operators with on/ignoring).
    """
    labels: set[str] = set()
    for _, group in _GROUPING.findall(expr):
        labels.update(x.strip() for x in group.split(",") if x.strip())
    text = _GROUPING.sub(" ", expr)

    def _matchers(m: re.Match[str]) -> str:
        inner = _STRING.sub('""', m.group(1))
        labels.update(_MATCHER.findall(inner))
        return " "

    text = re.sub(r"\{([^{}]*)\}", _matchers, text)
    text = _STRING.sub(" ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\boffset\s+-?\w+", " ", text)
    metrics: set[str] = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", text):
        ident, call = m.group(1), m.group(2)
        if call or ident.lower() in _KEYWORDS:
            continue
        metrics.add(ident)
    return frozenset(metrics), frozenset(labels)


# --- Grafana ----------------------------------------------------------------------------------------------------------

#: Concrete values for Grafana's template variables when a dashboard query is handed to promtool.
GRAFANA_SUBSTITUTIONS = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1h",
    "__range_s": "3600",
    "data_source": ".*",
    "service": "rag-app",
    "datasource": "prometheus",
}


def substitute_grafana(expr: str) -> str:
    """Replace $var, ${var} and ${var:format} with concrete values; fail on an unknown variable."""

    def _value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in GRAFANA_SUBSTITUTIONS:
            raise KeyError(f"unknown Grafana variable ${name} in {expr!r}")
        return GRAFANA_SUBSTITUTIONS[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", _value, expr)


def load_dashboard() -> dict[str, Any]:
    """Parse the shipped dashboard JSON."""
    return json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Yield every panel, descending into collapsed rows."""
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels", []))


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """Return (where, PromQL) for every Prometheus query in the dashboard: panels, annotations, variables.

    ``label_values(selector, label)`` variable queries contribute their selector.
    """
    found: list[tuple[str, str]] = []
    for panel in iter_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                found.append((f"panel {panel['id']} {panel['title']!r} {target['refId']}", target["expr"]))
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if annotation.get("expr"):
            found.append((f"annotation {annotation['name']!r}", annotation["expr"]))
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", query)
        if not m:
            raise ValueError(f"variable {var['name']}: unsupported query {query!r}")
        found.append((f"variable ${var['name']}", m.group(1)))
    return found


# --- YAML, rules, compose ---------------------------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    """Parse one YAML document."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def load_yaml_all(path: Path) -> list[Any]:
    """Parse every document of a multi-document YAML file."""
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def alert_rules() -> dict[str, dict[str, Any]]:
    """Return the shipped alerting rules by alert name."""
    rules = {}
    for group in load_yaml(RULES_FILE)["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rules[rule["alert"]] = rule
    return rules


def recorded_series() -> frozenset[str]:
    """Names of the series the shipped recording rules produce."""
    return frozenset(r["record"] for path in (RULES_FILE, CANARY_RULES_FILE) for g in load_yaml(path)["groups"]
                     for r in g["rules"] if "record" in r)


def range_windows(expr: str) -> list[str]:
    """Every range selector duration in an expression, in order (``[30m]`` -> ``30m``)."""
    return re.findall(r"\[(\d+[smhdwy])\]", expr)


def resolve_env(value: str, env: dict[str, str]) -> str:
    """Expand the collector's ``${env:NAME}`` / ``${env:NAME:-default}`` references."""

    def _sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is None:
            raise KeyError(f"${{env:{name}}} has no value and no default")
        return default

    return re.sub(r"\$\{env:(\w+)(?::-([^}]*))?\}", _sub, value)


def host_port(endpoint: str) -> tuple[str, int]:
    """Split ``host:port`` or ``scheme://host:port[/path]``."""
    if "://" in endpoint:
        parsed = urllib.parse.urlsplit(endpoint)
        assert parsed.hostname is not None and parsed.port is not None, endpoint
        return parsed.hostname, parsed.port
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def pipeline_problems(config: dict[str, Any]) -> list[str]:
    """Structural errors of a collector config: components used but not defined, defined but not used."""
    problems: list[str] = []
    service = config.get("service", {})
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set(), "connectors": set()}
    for pipeline_id, pipeline in service.get("pipelines", {}).items():
        if not pipeline.get("receivers") or not pipeline.get("exporters"):
            problems.append(f"pipeline {pipeline_id} needs receivers and exporters")
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []) or []:
                # A connector is an exporter of one pipeline and a receiver of another.
                bucket = "connectors" if component in (config.get("connectors") or {}) else kind
                used[bucket].add(component)
                if component not in (config.get(bucket) or {}):
                    problems.append(f"pipeline {pipeline_id}: {kind[:-1]} {component} is not defined")
    used_extensions = set(service.get("extensions", []) or [])
    for component in used_extensions - set(config.get("extensions") or {}):
        problems.append(f"extension {component} is not defined")
    for kind, components in used.items():
        for component in set(config.get(kind) or {}) - components:
            problems.append(f"{kind[:-1]} {component} is defined but no pipeline uses it")
    for component in set(config.get("extensions") or {}) - used_extensions:
        problems.append(f"extension {component} is defined but not enabled")
    return problems


def parse_duration(text: str) -> float:
    """Seconds in a Go/Prometheus duration such as ``60s``, ``1m30s`` or ``1h``."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


# --- processes on loopback --------------------------------------------------------------------------------------------


def run_promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run promtool and return the completed process (the caller asserts on it)."""
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get_json(url: str, timeout: float = 5.0) -> Any:
    """GET a JSON document."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def http_get_text(url: str, timeout: float = 5.0) -> str:
    """GET a text document."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return str(response.read().decode("utf-8"))


def prom_query(base_url: str, expr: str) -> list[dict[str, Any]]:
    """Evaluate an instant query; return the result vector."""
    body = http_get_json(f"{base_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def prom_alerts(base_url: str) -> list[dict[str, Any]]:
    """Return the alerts Prometheus currently holds (pending and firing)."""
    body = http_get_json(f"{base_url}/api/v1/alerts")
    return list(body["data"]["alerts"])


@contextlib.contextmanager
def prometheus_server(workdir: Path, config: dict[str, Any], rules: dict[str, Any] | None = None,
                      extra_args: tuple[str, ...] = ()) -> Iterator[str]:
    """Run a real Prometheus server on a free loopback port with its own storage; yield its base URL."""
    assert PROMETHEUS is not None
    workdir.mkdir(parents=True, exist_ok=True)
    if rules is not None:
        (workdir / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
        config = {**config, "rule_files": ["rules.yml"]}
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    port = free_port()
    log = (workdir / "prometheus.log").open("w", encoding="utf-8")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config_file}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            *extra_args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(workdir / 'prometheus.log').read_text()}")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{base}/-/ready", timeout=1).close()
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready: {(workdir / 'prometheus.log').read_text()}")
            time.sleep(0.2)
        yield base
    finally:
        stop_process(proc)
        log.close()


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """Terminate a child we started, then kill it if it lingers."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def demo_executable() -> str | None:
    """The ``cp-observe`` console script of this environment, if the CLI with its demo is importable."""
    try:
        import cp_observe.cli  # noqa: F401
    except ImportError:
        return None
    beside = Path(sys.executable).with_name("cp-observe")
    if beside.exists():
        return str(beside)
    return shutil.which("cp-observe")


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child process: ours plus ``extra``."""
    env = dict(os.environ)
    env.update(extra)
    return env
