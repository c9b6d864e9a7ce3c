#!/usr/bin/env python3
"""Write the canary rules (``ContextPrecisionVariantRegression``) for one segment label: a scan over doubling windows.

Segment label names are the user's choice (``segments=retriever.version`` gives the label ``retriever_version``),
and PromQL has no variables, so the rules are generated: ``rules/context_precision_canary.rules.yml`` is this
script's output for ``retriever.version``, and tests keep the two identical (``--tests`` prints the promtool
scenarios, ``tests/context_precision_canary.test.yml``). For another segment, from the repository root (then
reload Prometheus):

    python3 deploy/prometheus/canary_rules.py --segment tenant.tier \
        > deploy/prometheus/rules/context_precision_canary.rules.yml

(``--gap-sd``, ``--margin``, ``--z`` and ``--min-count`` change the parameters below; the promtool scenarios are for
the defaults.)

(``--baseline 0.7`` also records a constant baseline MAP for every data source and stage; without it the baseline
branch reads ``gen_ai_data_source_id_stage:context_precision_score:canary_baseline`` if you record it yourself.)

How it decides, per data source, stage and segment value v, at every evaluation (every ``INTERVAL``):

- **Windows.** For each window length W of WINDOWS (5 min doubling to 1280 min, those of the drop detection), v's
  count n, sum s and sum of squares q of AP over the last W, summed across replicas (recorded as the drop
  detection's are: the 5-minute increase, each longer window two recorded halves); the rest of the data source
  at the same stage over the same W (its totals minus v's: every other value, ``none`` and ``other`` included).
  The comparison is concurrent, so the daily and weekly rhythm (query mix, traffic) is in both sides alike and
  cancels: no day-ago baseline is needed.
- **Stages.** ``retrieval`` and ``rerank`` are kept apart: a data source with a reranker scores each reranked
  retrieval once per stage, and the rerank stage's MAP is not the retrieval stage's, so pooling them would count
  those retrievals twice and mix two populations (a variant reranked less often would look worse).
- **Statistic.** gap = mean_rest - mean_v; se = sqrt(max(var, VAR_FLOOR) (1/n + 1/n_rest) + GAP_SD^2) with var
  the AP variance of the whole data source at that stage over W (the same for both sides under no difference);
  z = (gap - MARGIN) / se, kept where n >= MIN_COUNT and n_rest >= MIN_COUNT (label ``against="rest"``).
  Against a recorded baseline MAP b (label ``against="baseline"``): gap = b - mean_v,
  se = sqrt(max(var_v, VAR_FLOOR) / n + GAP_SD^2), kept where n >= MIN_COUNT. GAP_SD is the spread of a gap
  between values that are equally good (routing is rarely perfectly random: a variant may get another query
  mix): with few evaluations it is negligible and the whole gap counts; with many, z is at most gap / GAP_SD, so
  a gap of a few hundredths never pages while one of 5 GAP_SD does. MARGIN (0 by default) is for a user who
  wants gaps smaller than it ignored however sure they are.
- **Groups.** The windows shorter than LONG_FROM minutes every minute (``context_precision.canary.recording``),
  the longer ones every LONG_EVERY_MIN minutes (``context_precision.canary.long``, its statistics labelled
  ``scan="long"``: a rule of the same name in two groups is told apart by its static labels): they are
  more than half of the series, and a canary is watched over minutes to hours after a rollout, where the short
  windows decide. The drop detection computes every window every minute (a long window's brief excursions past
  the threshold decide a slow drift there); here that measured about a third more rule time at 10 data sources.
  The alert group takes the largest z over both.
- **Threshold.** The alert fires when the largest z over windows (and branches) exceeds Z, with no ``for``: the
  threshold is set for the whole family of windows as the drop detection's is (``detection_rules.family_z``,
  about FALSE_ALARMS_PER_MONTH false alarm per value and stage per month under no difference).

``cp_observe/demo/_canary.py`` evaluates the same arithmetic in Python (the demo and
``benchmarks/alerts/bench_alerts.py``), with the statistic in ``cp_observe/_stats/_canary_scan.py``; its constants equal
these (``tests/integration/test_canary_rules.py``). Standard library only: no cp-observe import is needed to
regenerate the rules.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import re
import sys
from pathlib import Path


def _detection() -> object:
    """detection_rules.py beside this file: the windows and the family threshold are shared, not copied."""
    spec = importlib.util.spec_from_file_location("_cp_detection_rules", Path(__file__).with_name("detection_rules.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_DETECTION = _detection()
WINDOWS: tuple[int, ...] = _DETECTION.WINDOWS  # type: ignore[attr-defined]
FALSE_ALARMS_PER_MONTH = 0.5  # per segment value and stage, under no difference (the table shows the measured)
Z: float = _DETECTION.family_z(FALSE_ALARMS_PER_MONTH, WINDOWS)  # type: ignore[attr-defined]
MARGIN = 0.0  # a gap smaller than this is never paged, however sure (0: any gap the evidence shows)
GAP_SD = 0.01  # how far apart equally good values' MAPs stray (routing is rarely perfectly random), SD
MIN_COUNT = 20  # scored evaluations in the window, on each side
VAR_FLOOR = 0.01  # AP variance is never taken below 0.1^2 (constant scores would give an infinite z)
INTERVAL = "1m"
#: Windows of at least LONG_FROM minutes are the long group's, evaluated every LONG_EVERY_MIN minutes: inside the
#: 5-minute lookback (the alert group reads their z between two evaluations) and a divisor of every long window's
#: half (each doubling ``offset`` lands on an earlier evaluation).
LONG_FROM = 80
LONG_EVERY_MIN = 4
LONG_INTERVAL = f"{LONG_EVERY_MIN}m"
SHORT_WINDOWS = tuple(w for w in WINDOWS if w < LONG_FROM)
LONG_WINDOWS = tuple(w for w in WINDOWS if w >= LONG_FROM)
LONG_SCAN = "long"  # the static label ``scan`` of the long group's statistics (the recording group's have none)
assert all((w // 2) % LONG_EVERY_MIN == 0 for w in LONG_WINDOWS), LONG_WINDOWS
INTERVAL_Z = 1.96  # the estimated gap's interval in the annotations: 95 %, two-sided
DEFAULT_SEGMENT = "retriever.version"
DS = "gen_ai_data_source_id"
STAGE = "stage"  # the metric label n.STAGE: retrieval or rerank
BASELINE_SERIES = f"{DS}_{STAGE}:context_precision_score:canary_baseline"
METRICS = {
    "count": "context_precision_score_count",
    "sum": "context_precision_score_sum",
    "squares": "context_precision_score_squares_total",
}


def label_name(attribute: str) -> str:
    """The segment's label name: what ``cp_observe/_config/_segments.py`` makes of the attribute name."""
    return re.sub(r"[^A-Za-z0-9_]", "_", attribute)


def _names(seg: str) -> tuple[str, str, str, str]:
    """(value prefix, stage prefix, group labels, maximum series) for the segment label ``seg``."""
    return (f"{DS}_{STAGE}_{seg}_window:context_precision_score", f"{DS}_{STAGE}_window:context_precision_score",
            f"{DS}, {STAGE}, {seg}", f"{DS}_{STAGE}_{seg}:context_precision_score:gap_z_max")


def rules(segment: str = DEFAULT_SEGMENT, baseline: float | None = None, margin: float = MARGIN, z: float = Z,
          min_count: int = MIN_COUNT, gap_sd: float = GAP_SD) -> str:
    """The rule file's text for ``segment`` (an attribute name, as given to the ``segments`` setting)."""
    seg = label_name(segment)
    p, _, group, top_series = _names(seg)
    windows = ", ".join(f"{w}m" for w in WINDOWS)
    lines = [
        "# cp-observe — canary rules: one segment value's sampled MAP against the rest of its data source at the",
        "# same stage (retrieval or rerank: each reranked retrieval is scored once per stage), over doubling windows.",
        f"# GENERATED by deploy/prometheus/canary_rules.py --segment {segment}"
        + (f" --baseline {baseline}" if baseline is not None else "")
        + (f" --gap-sd {gap_sd}" if gap_sd != GAP_SD else "")
        + (f" --margin {margin}" if margin != MARGIN else "") + (f" --z {z}" if z != Z else "")
        + (f" --min-count {min_count}" if min_count != MIN_COUNT else "") + " (do not edit: regenerate).",
        f"# Segment label: {seg} (the `segments` setting's attribute {segment}). Windows: {windows}.",
        f"# Gap SD {gap_sd}, margin {margin}, z > {z} (the whole family: about {FALSE_ALARMS_PER_MONTH} false alarm per"
        " value and stage"
        f" per month), minimum {min_count} scored",
        "# evaluations on each side. The script's docstring says how it decides; deploy/README.md (Runbook:",
        "# ContextPrecisionVariantRegression) and docs/how-to/segments-and-canaries.md explain what to tune.",
        "",
        "groups:",
        "  - name: context_precision.canary.recording",
        f"    interval: {INTERVAL}",
        "    rules:",
        f"      # Per data source, stage, {seg} value and window: count, sum and sum of squares of AP over the window.",
    ]
    short, long = SHORT_WINDOWS, LONG_WINDOWS
    windowed = re.compile(rf"(?<![\w:])({re.escape(DS)}_{STAGE}(?:_{seg})?_window:[\w:]+)(\{{[^}}]*\}})?")
    stats = _statistics(seg, baseline, margin, min_count, gap_sd)
    lines += _DETECTION.window_records(p, METRICS, group, short)  # type: ignore[attr-defined]
    lines += _DETECTION.only(stats, short, windowed)  # type: ignore[attr-defined]
    lines += [
        "",
        "  - name: context_precision.canary.long",
        f"    interval: {LONG_INTERVAL}",
        "    rules:",
        f"      # The same for the windows of {LONG_FROM} minutes and more, every {LONG_INTERVAL}: each",
        "      # reads the recording group's half-length record at its last evaluation. The statistics carry the label",
        f"      # scan=\"{LONG_SCAN}\" (a rule of the same name in two groups is told apart by its static labels,"
        " promtool's lint).",
    ]
    lines += _DETECTION.window_records(p, METRICS, group, long)  # type: ignore[attr-defined]
    # The constant baseline (--baseline) is the recording group's alone: a second series of it per data source and
    # stage would make every gap against it a many-to-many match.
    long_stats = [x for x in _statistics(seg, None, margin, min_count, gap_sd) if not x.lstrip().startswith("#")]
    lines += _labelled(_DETECTION.only(long_stats, long, windowed))  # type: ignore[attr-defined]
    return _alerts(lines, seg, p, group, top_series, z, gap_sd, margin)


def _labelled(lines: list[str]) -> list[str]:
    """Rules (``lines``) with the static label ``scan`` (LONG_SCAN): added to a rule's labels, or as its labels.
    Every operation that mixes them with the window records matches on the value's labels and window."""
    out: list[str] = []
    blocks: list[list[str]] = []
    for line in lines:
        if "- record: " in line:
            blocks.append([])
        blocks[-1].append(line)
    for block in blocks:
        if any(line.startswith("        labels: {") for line in block):
            out += [line.replace("}", f", scan: {LONG_SCAN}}}") if line.startswith("        labels: {") else line
                    for line in block]
        else:
            out += [*block, f"        labels: {{scan: {LONG_SCAN}}}"]
    return out


def _statistics(seg: str, baseline: float | None, margin: float, min_count: int, gap_sd: float) -> list[str]:
    """The statistics of every window: the stage's totals and the rest, means, gaps, their standard errors, z."""
    p, t, group, _ = _names(seg)
    on_value = f"on ({group}, window)"
    on_stage = f"on ({DS}, {STAGE}, window)"
    lines = [f"      # The data source's totals at the stage, and the rest: totals minus the value's (group_right"
             f" keeps {seg})."]
    for part in METRICS:
        lines += [
            f"      - record: {t}_{part}:window",
            f"        expr: sum by ({DS}, {STAGE}, window) ({p}_{part}:window)",
        ]
    for part in METRICS:
        lines += [
            f"      - record: {p}_{part}:rest",
            f"        expr: {t}_{part}:window - {on_stage} group_right {p}_{part}:window",
        ]
    if baseline is not None:
        lines += [
            "      # The configured baseline MAP, the same for every data source and stage (--baseline).",
            f"      - record: {BASELINE_SERIES}",
            f"        expr: max by ({DS}, {STAGE}) ({t}_count:window) * 0 + {baseline}",
        ]
    stage_mean = f"({t}_sum:window / {t}_count:window)"
    variance = f"clamp_min({t}_squares:window / {t}_count:window - {stage_mean} ^ 2, {VAR_FLOOR})"
    # Only where a baseline gap exists (a recorded baseline MAP): without one the branch reads one empty series.
    own_variance = (f"clamp_min(({p}_squares:window and {on_value} {p}:gap{{against=\"baseline\"}}) / {p}_count:window"
                    f" - {on_value} {p}:mean ^ 2, {VAR_FLOOR})")
    lines += [
        "      # Means, the gap (reference - value) against the rest and against the baseline, its standard error, z.",
        f"      - record: {p}:mean",
        f"        expr: {p}_sum:window / {p}_count:window",
        f"      - record: {p}:rest_mean",
        f"        expr: {p}_sum:rest / {p}_count:rest",
        f"      - record: {p}:gap",
        f"        expr: {p}:rest_mean - {p}:mean",
        "        labels: {against: rest}",
        f"      - record: {p}:gap",
        f"        expr: {BASELINE_SERIES} - on ({DS}, {STAGE}) group_right {p}:mean",
        "        labels: {against: baseline}",
        f"      - record: {p}:gap_stderr",
        f"        expr: sqrt((1 / {p}_count:window + {on_value} 1 / {p}_count:rest) * {on_stage} group_left {variance}"
        f" + {gap_sd ** 2!r})",
        "        labels: {against: rest}",
        f"      - record: {p}:gap_stderr",
        f"        expr: sqrt({own_variance} / {p}_count:window + {gap_sd ** 2!r})",
        "        labels: {against: baseline}",
        f"      - record: {p}:gap_z",
        "        expr: |",
        f"          ({p}:gap{{against=\"rest\"}} - {margin}) / {p}:gap_stderr{{against=\"rest\"}}",
        f"          and {on_value} {p}_count:window >= {min_count}",
        f"          and {on_value} {p}_count:rest >= {min_count}",
        "        labels: {against: rest}",
        f"      - record: {p}:gap_z",
        "        expr: |",
        f"          ({p}:gap{{against=\"baseline\"}} - {margin}) / {p}:gap_stderr{{against=\"baseline\"}}",
        f"          and {on_value} {p}_count:window >= {min_count}",
        "        labels: {against: baseline}",
    ]
    return lines


def _alerts(lines: list[str], seg: str, p: str, group: str, top_series: str, z: float, gap_sd: float, margin: float
            ) -> str:
    """The rule file's text: ``lines`` (the recording groups), then the alert group."""
    sel = f'{DS}=\\"%s\\",{STAGE}=\\"%s\\",{seg}=\\"%s\\"'
    top = f"topk(1, {p}:gap_z{{{sel}}})"
    args = f"$labels.{DS} $labels.{STAGE} $labels.{seg}"

    def picked(series: str, match: str, text: str) -> str:
        every = " ".join([args] * (series.count(sel) + 1))  # the printf's arguments: each selector's, then top's
        return (f"{{{{ with query (printf \"{series} and on ({group}, {match}) {top}\" {every}) }}}}"
                f"{{{{ with first . }}}}{text}{{{{ end }}}}{{{{ end }}}}")

    who = f"{{{{ $labels.{DS} }}}} at its {{{{ $labels.{STAGE} }}}} stage for {seg}={{{{ $labels.{seg} }}}}"
    lines += [
        "",
        "  - name: context_precision.canary.alerts",
        f"    interval: {INTERVAL}",
        "    rules:",
        f"      # The family's statistic per data source, stage and value, over both groups' windows (the dashboard"
        f" plots it against {z}).",
        f"      - record: {top_series}",
        f"        expr: max by ({group}) ({p}:gap_z)",
        "      - alert: ContextPrecisionVariantRegression",
        "        expr: |",
        f"          {top_series} > {z}",
        "        labels:",
        "          severity: warning",
        "        annotations:",
        f"          summary: 'Context precision of {{{{ $labels.{DS} }}}} ({{{{ $labels.{STAGE} }}}} stage) with"
        f" {seg}={{{{ $labels.{seg} }}}} is below the rest of its data source or its baseline"
        f" (scan statistic {{{{ $value | printf \"%.1f\" }}}} > {z})'",
        "          description: >-",
        f"            {{{{ with query (printf \"{top}\" {args}) }}}}{{{{ with first . }}}}Over the last"
        f" {{{{ .Labels.window }}}}, the sampled MAP of retriever {who} is below",
        f"            {{{{ if eq .Labels.against \"rest\" }}}}the MAP of its other {seg} values at that stage"
        "{{ else }}the configured baseline MAP{{ end }}",
        f"            at z = {{{{ .Value | printf \"%.1f\" }}}} > {z} ({_spread(gap_sd, margin)}).{{{{ end }}}}"
        "{{ end }}",
        "            " + picked(f"{p}:gap{{{sel}}}", "window, against",
                                "Estimated gap {{ .Value | printf \"%.3f\" }}"),
        "            " + picked(f"{INTERVAL_Z} * {p}:gap_stderr{{{sel}}}", "window, against",
                                "± {{ .Value | printf \"%.3f\" }} (95%)"),
        "            " + picked(f"({p}:gap{{{sel}}} + ignoring (against) group_left {p}:mean{{{sel}}})",
                                "window, against",
                                "below a MAP of {{ .Value | printf \"%.3f\" }}") + ",",
        "            " + picked(f"{p}_count:window{{{sel}}}", "window",
                                "on {{ .Value | printf \"%.0f\" }} scored evaluations of the value"),
        "            " + picked(f"{p}_count:rest{{{sel}}}", "window",
                                "and {{ .Value | printf \"%.0f\" }} of the rest.") ,
        "            " + advice(seg, f"{{{{ $labels.{seg} }}}}"),
        f"          dashboard: '/d/cp-observe-context-precision/context-precision?var-data_source="
        f"{{{{ $labels.{DS} }}}}'",
        "          runbook_url: 'deploy/README.md#runbook-contextprecisionvariantregression'",
        "",
    ]
    return "\n".join(lines)


# --- the rules' arithmetic in Python, and the promtool scenarios: tests/context_precision_canary.test.yml --------

STEP_MIN = 5  # the scenarios' scrape and evaluation interval
Counters = list[list[float]]  # cumulative count, sum and squares at every STEP_MIN


def evaluate(sides: dict[tuple[str, str], Counters], minute: int, baselines: dict[str, float] | None = None
             ) -> dict[tuple[str, str], tuple | None]:
    """The rules at ``minute`` for one data source: per (stage, value), the largest z's
    (z, window, against, gap, se, reference MAP, n, n_rest), or None. ``sides``: the counters per (stage, value).
    ``increase`` over a window whose edges are samples is their difference (Prometheus 2.x reads the closed range).
    """
    out: dict[tuple[str, str], tuple | None] = {}
    at = minute // STEP_MIN
    for key, counters in sides.items():
        stage = key[0]
        best = None
        for w in WINDOWS:

            def window(c: Counters) -> list[float]:
                # the window records as the rules build them (the drop detection's doubling records)
                return [_DETECTION.recorded_window(series, w)[at] or 0.0 for series in c]  # type: ignore[attr-defined]

            n, s, q = window(counters)
            total = [0.0, 0.0, 0.0]
            for (other_stage, _), c in sides.items():
                if other_stage == stage:
                    total = [a + b for a, b in zip(total, window(c))]
            rest_n, rest_s, _ = (a - b for a, b in zip(total, (n, s, q)))
            found = []
            if n >= MIN_COUNT and rest_n >= MIN_COUNT:
                var = max(total[2] / total[0] - (total[1] / total[0]) ** 2, VAR_FLOOR)
                se = math.sqrt(var * (1 / n + 1 / rest_n) + GAP_SD**2)
                gap = rest_s / rest_n - s / n
                found.append(((gap - MARGIN) / se, w, "rest", gap, se, rest_s / rest_n, n, rest_n))
            if baselines and stage in baselines and n >= MIN_COUNT:
                mean = s / n
                se = math.sqrt(max(q / n - mean ** 2, VAR_FLOOR) / n + GAP_SD**2)
                gap = baselines[stage] - mean
                found.append(((gap - MARGIN) / se, w, "baseline", gap, se, baselines[stage], n, rest_n))
            for candidate in found:
                if best is None or candidate[0] > best[0]:
                    best = candidate
        out[key] = best
    return out


def _counters(minutes: int, per_minute: float, mean_at, square_of=lambda mean: None) -> Counters:
    """Cumulative count, sum and squares at every STEP_MIN up to ``minutes``. Scores are 0 or 1 (squares grow like
    sums) unless ``square_of`` gives the square of a constant score."""
    count = total = squares = 0.0
    out: Counters = [[0.0], [0.0], [0.0]]
    for minute in range(0, minutes, STEP_MIN):
        mean = mean_at(minute)
        count += per_minute * STEP_MIN
        total += per_minute * STEP_MIN * mean
        square = square_of(mean)
        squares += per_minute * STEP_MIN * (mean if square is None else square)
        for series, value in zip(out, (count, total, squares)):
            series.append(value)
    return out


def _values(series: list[float]) -> str:
    """promtool's expanding notation, one segment per run of equal steps."""
    return _DETECTION._values(series)  # type: ignore[attr-defined]


def _quote(text: str) -> str:
    return _DETECTION._quote(text)  # type: ignore[attr-defined]


def _spread(gap_sd: float, margin: float) -> str:
    """What the description says of the gap's spread and the margin."""
    return f"gap SD {gap_sd}" + (f", margin {margin}" if margin else "")


def advice(seg: str, value: str) -> str:
    """The description's last sentence: what to do, and where the worst evaluations of the value are."""
    return ("Roll the variant back or hold the rollout; compare its worst evaluations with the rest's: the"
            " exemplars on the dashboard's MAP panels, or Jaeger tags gen_ai.evaluation.score.label=fail"
            f" context_precision.segment.{seg}={value}.")


def annotations(source: str, stage: str, seg: str, value: str, found: tuple) -> tuple[str, str]:
    """The alert's summary and description as Prometheus renders them for ``found`` (``evaluate``'s tuple)."""
    z, w, against, gap, se, reference, n, rest_n = found
    summary = (f"Context precision of {source} ({stage} stage) with {seg}={value} is below the rest of its data"
               f" source or its baseline (scan statistic {z:.1f} > {Z})")
    compared = (f"the MAP of its other {seg} values at that stage" if against == "rest"
                else "the configured baseline MAP")
    description = (
        f"Over the last {w}m, the sampled MAP of retriever {source} at its {stage} stage for {seg}={value} is below"
        f" {compared} at z = {z:.1f} > {Z} ({_spread(GAP_SD, MARGIN)}). Estimated gap {gap:.3f}"
        f" ± {INTERVAL_Z * se:.3f} (95%) below a MAP of {reference:.3f}, on {n:.0f} scored evaluations of the"
        f" value and {rest_n:.0f} of the rest. " + advice(seg, value)
    )
    return summary, description


def daily_mean(minute: int) -> float:
    """The scenarios' healthy MAP: the drop detection's daily pattern (binary fractions: exact sums)."""
    return _DETECTION.daily_mean(minute)  # type: ignore[attr-defined]


LABELS = ('{{job="rag-app",instance="pod-1",otel_scope_name="cp_observe",gen_ai_evaluation_name="context_precision",'
          'gen_ai_data_source_id="{source}",stage="{stage}",{seg}="{value}"}}')
SCENARIO_SEGMENT = DEFAULT_SEGMENT


def _group(name: str, minutes: int, sources: dict[str, dict[tuple[str, str], Counters]],
           baselines: dict[str, dict[str, float]], times: list[int]) -> list[str]:
    """One promtool test group: its input series and the alert's expected state at ``times``."""
    seg = label_name(SCENARIO_SEGMENT)
    lines = [f"  - name: {name}", f"    interval: {STEP_MIN}m", "    input_series:"]
    for source, sides in sources.items():
        for (stage, value), counters in sides.items():
            labels = LABELS.format(source=source, stage=stage, seg=seg, value=value)
            for metric, series in zip(METRICS.values(), counters):
                lines += [f"      - series: '{metric}{labels}'", f"        values: '{_values(series)}'"]
        for stage, level in baselines.get(source, {}).items():
            lines += [f"      - series: '{BASELINE_SERIES}{{{DS}=\"{source}\",{STAGE}=\"{stage}\"}}'",
                      f"        values: '{level!r}+0x{minutes // STEP_MIN}'"]
    lines.append("    alert_rule_test:")
    for minute in times:
        fired = [(source, key, found) for source, sides in sources.items()
                 for key, found in evaluate(sides, minute, baselines.get(source)).items()
                 if found is not None and found[0] > Z]
        if not fired:
            lines.append(f"      - {{eval_time: {minute}m, alertname: ContextPrecisionVariantRegression,"
                         " exp_alerts: []}")
            continue
        lines += [f"      - eval_time: {minute}m", "        alertname: ContextPrecisionVariantRegression",
                  "        exp_alerts:"]
        for source, (stage, value), found in fired:
            summary, description = annotations(source, stage, seg, value, found)
            lines += [
                f"          - exp_labels: {{severity: warning, {DS}: {source}, {STAGE}: {stage}, {seg}: {value}}}",
                "            exp_annotations:",
                f"              summary: {_quote(summary)}",
                f"              description: {_quote(description)}",
                "              dashboard: '/d/cp-observe-context-precision/context-precision?var-data_source="
                f"{source}'",
                "              runbook_url: 'deploy/README.md#runbook-contextprecisionvariantregression'",
            ]
    return lines


def _fires(sources: dict, baselines: dict, source: str, minute: int) -> set[tuple[str, str]]:
    found = evaluate(sources[source], minute, baselines.get(source))
    return {key for key, f in found.items() if f is not None and f[0] > Z}


def scenarios() -> str:
    """The promtool test file for the shipped segment: two groups, expectations from ``evaluate``.

    1. Changes, day 2 at 01:00 (every window lies within the data), both variants 8 scored evaluations a minute
       with the daily pattern: steady stays equal (quiet); step: v2 drops 0.25 (fires); drift: v2 slides 1/32 an
       hour for 6 h (fires); thin: v2 at 0.75 an hour drops 0.5 (under the minimum in every window: quiet).
    2. Edges with constant scores (only the gap SD and the variance floor decide), checked once every window is
       full: stages kept apart, a rerank-stage regression, a gap the gap SD absorbs and one it does not, below
       and near a recorded baseline.
    """
    retrieval, rerank = "retrieval", "rerank"
    change, end = 1500, 1500 + 8 * 60
    sources: dict[str, dict[tuple[str, str], Counters]] = {}
    for name, v2_mean, v2_rate in (
        ("steady", daily_mean, 8),
        ("step", lambda m: daily_mean(m) - (0.25 if m >= change else 0), 8),
        ("drift", lambda m: daily_mean(m) - 0.03125 * min(max((m - change) // 60 + 1, 0), 6), 8),
        ("thin", lambda m: daily_mean(m) - (0.5 if m >= change else 0), 0.75 / 60),
    ):
        sources[name] = {(retrieval, "v1"): _counters(end, 8, daily_mean),
                         (retrieval, "v2"): _counters(end, v2_rate, v2_mean)}
    checks = range(change - 60, end + 1, STEP_MIN)
    for name in ("steady", "thin"):
        assert not any(_fires(sources, {}, name, m) for m in checks), name
    assert not any(_fires(sources, {}, name, m) for name in sources for m in checks if m < change)
    firsts = {name: next(m for m in checks if m >= change and _fires(sources, {}, name, m)) for name in
              ("step", "drift")}
    assert all(_fires(sources, {}, name, m) == {(retrieval, "v2")} for name in firsts for m in checks
               if m >= firsts[name])
    times = sorted({change - STEP_MIN, end, *firsts.values(), *(m - STEP_MIN for m in firsts.values())})

    edge_end = max(WINDOWS) + 30

    def constant(rate: float, score: float) -> Counters:
        return _counters(edge_end, rate, lambda m: score, lambda mean: mean * mean)

    edges = {
        # Per stage the variants are equal; the reranker reranks all of v1's retrievals but 1 in 10 of v2's.
        "apart": {(retrieval, "v1"): constant(10, 0.625), (retrieval, "v2"): constant(10, 0.625),
                  (rerank, "v1"): constant(10, 0.9375), (rerank, "v2"): constant(1, 0.9375)},
        "rr": {(retrieval, "v1"): constant(10, 0.625), (retrieval, "v2"): constant(10, 0.625),
               (rerank, "v1"): constant(10, 0.875), (rerank, "v2"): constant(10, 0.625)},
        "inside": {(retrieval, "v1"): constant(10, 0.8125), (retrieval, "v2"): constant(10, 0.78125)},
        "outside": {(retrieval, "v1"): constant(10, 0.8125), (retrieval, "v2"): constant(10, 0.75)},
        "base": {(retrieval, "v1"): constant(10, 0.8125)},
        "near": {(retrieval, "v1"): constant(10, 0.8125)},
    }
    edge_baselines = {"base": {retrieval: 0.9375}, "near": {retrieval: 0.828125}}
    at = edge_end - STEP_MIN * 2
    expected = {"apart": set(), "rr": {(rerank, "v2")}, "inside": set(), "outside": {(retrieval, "v2")},
                "base": {(retrieval, "v1")}, "near": set()}
    assert {name: _fires(edges, edge_baselines, name, at) for name in edges} == expected
    # Pooled over the stages (one population), v2 of "apart" would fire: keeping the stages apart is what quiets it.
    pooled = {(retrieval, v): [[a + b for a, b in zip(edges["apart"][(retrieval, v)][k],
                                                      edges["apart"][(rerank, v)][k])] for k in range(3)]
              for v in ("v1", "v2")}
    assert _fires({"pooled": pooled}, {}, "pooled", at) == {(retrieval, "v2")}

    lines = [
        "# promtool unit tests for rules/context_precision_canary.rules.yml (ContextPrecisionVariantRegression,",
        f"# segment label {label_name(SCENARIO_SEGMENT)}). GENERATED by deploy/prometheus/canary_rules.py --tests"
        " (do not edit: regenerate).",
        "# The expected firing times and annotations are the generator's own arithmetic (evaluate), so rules that",
        "# compute anything else fail here. Group 1: changes of v2 against v1 with the daily pattern in both (scores",
        "# 0 or 1, squares grow like sums). Group 2: constant scores (the variance floor and the gap SD decide).",
        "# In group 2 the reranker reranks all of v1's retrievals but 1 in 10 of v2's in \"apart\": pooled over the",
        "# stages v2 would fire (the generator asserts it); kept apart, it is quiet.",
        "",
        "rule_files:",
        "  - ../rules/context_precision_canary.rules.yml",
        "",
        f"evaluation_interval: {STEP_MIN}m",
        "",
        "# The alert reads what the recording group wrote at the same instant: without an order promtool",
        "# evaluates the groups in a random one, and the alert sometimes reads the previous step's values.",
        "group_eval_order:",
        "  - context_precision.canary.recording",
        "  - context_precision.canary.long",
        "  - context_precision.canary.alerts",
        "",
        "tests:",
    ]
    lines += _group("steady daily pattern quiet, step and drift fire, too few evaluations quiet", end, sources, {},
                    times)
    lines += _group("stages kept apart, a rerank regression at its stage, gap SD edges, the baseline", edge_end,
                    edges, edge_baselines, [at])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the rules for ``--segment`` (default ``retriever.version``), or the promtool scenarios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--segment", default=DEFAULT_SEGMENT, help="the segment's attribute name, as in `segments`")
    parser.add_argument("--baseline", type=float, help="a constant baseline MAP for every data source")
    parser.add_argument("--margin", type=float, default=MARGIN, help="the smallest gap that counts (MAP units)")
    parser.add_argument("--gap-sd", type=float, default=GAP_SD,
                        help="how far apart equally good values' MAPs stray (SD, MAP units)")
    parser.add_argument("--z", type=float, default=Z, help="the family's threshold (higher: fewer false alarms)")
    parser.add_argument("--min-count", type=int, default=MIN_COUNT, help="scored evaluations a side needs")
    parser.add_argument("--tests", action="store_true", help="print the promtool scenarios for the shipped defaults")
    parser.add_argument("--shard", action="append", default=[], metavar="REGEX",
                        help="a recording group for the data sources whose id matches REGEX (repeat; a last group"
                             " takes the rest)")
    args = parser.parse_args(argv)
    text = scenarios() if args.tests else rules(args.segment, args.baseline, args.margin, args.z, args.min_count,
                                                args.gap_sd)
    if args.shard and not args.tests:
        for group in ("context_precision.canary.recording", "context_precision.canary.long"):
            text = _DETECTION.shard(text, args.shard, group)  # type: ignore[attr-defined]
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
