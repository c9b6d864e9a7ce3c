#!/usr/bin/env python3
"""Write the drop-detection rules (``ContextPrecisionMAPRegression``): a scan over doubling windows.

``rules/context_precision_detection.rules.yml`` is this script's output with the defaults, and tests keep the two
identical. To change a parameter, from the repository root (then reload Prometheus):

    python3 deploy/prometheus/detection_rules.py --level-sd 0.02 \
        > deploy/prometheus/rules/context_precision_detection.rules.yml

How it decides, per data source, at every evaluation (every ``INTERVAL``):

- **Windows.** For each window length W of WINDOWS (5 min, doubling, up to 1280 min, about a day), the count n,
  sum s and sum of squares q of the scored evaluations' AP over the last W: the counters every process and
  replica exports (``context_precision_score_{count,sum}``, ``context_precision_score_squares_total``), summed
  across replicas by data source. Only the 5-minute window reads them (``increase``); each longer window is the
  record of half its length now plus the same record ``offset`` half its length (``window_records``): two halves
  that tile the window, so each raw minute counts once and an evaluation reads two samples, not W minutes.
- **Baseline.** The same W at the same time of day on each of the last BASELINE_DAYS days: the window records at
  ``offset 1d`` .. ``offset 7d``, pooled: N, S, Q (seven lookups, not seven raw ranges). The pools, and what
  follows from them alone, are a group of their own evaluated every BASELINE_INTERVAL (they cost more than the rest
  of the scan together; the minute group reads what it wrote last, a pool up to that much older in the time of
  day). Prometheus must keep
  9 days; ``cp-observe deploy backfill`` writes the records for past days where the rules are new. Same time of
  day follows the daily rhythm (query mix, traffic); seven days
  average the weekly one out. A day with no data (a new data source) is left out of the pool rather than voiding
  it. What is left between today and that pool is the weekly rhythm's deviation for today: LEVEL_SD is its
  typical size, and it enters the standard error below.
- **Statistic.** drop = S/N - s/n; its standard error uses the baseline's variance (the same under no change, and
  seven times the evidence of the window's) and the level's day-to-day spread, which no number of evaluations in
  the window removes: se = sqrt(max(Q/N - (S/N)^2, VAR_FLOOR) (1/n + 1/N) + LEVEL_SD^2);
  z = (drop - MARGIN) / se, kept only where n >= MIN_COUNT and N >= MIN_COUNT. With few evaluations the first term
  rules and a drop counts whole; with many, z is at most drop / LEVEL_SD, so the week's rhythm (a few hundredths)
  stays far below the threshold while a drop of 5 LEVEL_SD fires. MARGIN (0 by default) is for a user who wants
  drops smaller than it ignored however sure they are.
- **Where the cheap-plus-LLM cascade runs.** The score series mix the LLM judge's AP (where it judged) with the
  cheap judge's, and a drop only the LLM can tell would move that mix by llm_share of itself. In a window whose
  cascade sums (``context_precision_cascade_sums_total{term}``) hold MIN_COUNT LLM-judged evaluations, and as many
  in its baseline, the window and its baseline compare the PPI++ MAP instead: the baseline's PPI++ weight lambda
  and variances, both means with that weight, se^2 = var(y - lambda f)(1/n + 1/n_b) + lambda^2 var(f)(1/N + 1/N_b)
  + LEVEL_SD^2, n counting LLM-judged evaluations (``cp_observe/_judging/_ppi.py``: ``ppi_drop_z``). The records
  the alert reads (``<PREFIX>:drop_z`` and its figures) are these where they judge, the score series' where the
  window holds no cascade evaluation (a cascade turned off), and none in a window whose cascade has too few.
- **Threshold.** The alert fires when the largest z over the windows exceeds Z. Z is set for the whole family:
  under no change, a moving window's z crosses a level z about (T / W) z phi(z) times over a time T (the scan
  statistic's Gaussian approximation); summed over the windows, with T a month, that is at most
  FALSE_ALARMS_PER_MONTH. ``Z`` below is that solution, rounded up.

A short window catches a large drop within minutes at high volume; a long window holds enough evaluations to see
a small drop, or any drop at low volume. ``benchmarks/alerts/bench_alerts.py`` evaluates the same arithmetic in Python
(it imports this file's constants) and checks it against a real Prometheus; ``cp_observe/_stats/_sequential.py``
holds the shared formulas. Standard library only: no cp-observe import is needed to regenerate the rules.
"""

from __future__ import annotations

import argparse
import math
import re
import sys

#: Window lengths in minutes: 5 min doubling to 1280 min (21 h 20 min).
WINDOWS = (5, 10, 20, 40, 80, 160, 320, 640, 1280)
BASELINE_DAYS = 7
MARGIN = 0.0  # a drop smaller than this is never paged, however sure (0: any drop the evidence shows)
LEVEL_SD = 0.01  # how far a healthy day's MAP strays from the 7-day same-time baseline (the week's rhythm), SD
MIN_COUNT = 20  # scored evaluations in the window, and in the pooled baseline
VAR_FLOOR = 0.01  # AP variance is never taken below 0.1^2 (a constant baseline would give an infinite z)
FALSE_ALARMS_PER_MONTH = 0.5  # the design target for the family, per data source (the table shows the measured)
INTERVAL = "1m"
#: The baseline group's interval: the seven-day pools (the costliest reads by far) and what follows from them alone.
#: Shorter than Prometheus's 5-minute lookback, so its records never go stale between evaluations, and a divisor of
#: a day, so each evaluation's ``offset 1d..7d`` lands on the 1-minute grid the window records are written on.
BASELINE_EVERY_MIN = 4
BASELINE_INTERVAL = f"{BASELINE_EVERY_MIN}m"
MONTH_MINUTES = 30 * 24 * 60
INTERVAL_Z = 1.96  # the estimated drop's interval in the annotations: 95 %, two-sided
DS = "gen_ai_data_source_id"
PREFIX = f"{DS}_window:context_precision_score"
CASCADE_METRIC = "context_precision_cascade_sums_total"
CASCADE = f"{DS}_window:context_precision_cascade_sums"
CASCADE_TERMS = f"{DS}_term_window:context_precision_cascade_sums"
#: The cascade's PPI sums (cp_observe/_names.py, METRIC_CASCADE_SUMS): over all, then over the LLM-judged subsample.
PPI_TERMS = ("count", "f", "f2", "n", "y", "y2", "f_sub", "f2_sub", "fy")


def expected_crossings(z: float, windows: tuple[int, ...] = WINDOWS, minutes: int = MONTH_MINUTES) -> float:
    """Expected number of times the family's largest z crosses ``z`` in ``minutes`` under no change."""
    density = math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    return sum(minutes / w for w in windows) * z * density


def family_z(target: float = FALSE_ALARMS_PER_MONTH, windows: tuple[int, ...] = WINDOWS) -> float:
    """The smallest z (to 0.1, rounded up) whose expected crossings per month are at most ``target``."""
    z = 2.0
    while expected_crossings(z, windows) > target:
        z = round(z + 0.1, 1)
    return z


Z = family_z()


def _baseline(record: str, by: str = DS) -> str:
    """The pooled baseline of every window at once: the window record at ``offset 1d`` .. ``offset 7d``, summed.

    A day whose record is missing (a data source newer than that day, or recordings younger than it) is left out
    of the pool rather than voiding it: a new installation compares with the days it has."""
    days = " or ".join(f'label_replace({record} offset {d}d, "day", "{d}", "", "")'
                       for d in range(1, BASELINE_DAYS + 1))
    return f"sum by ({by}, window) ({days})"


def window_records(prefix: str, metrics: dict[str, str], group: str) -> list[str]:
    """Recording rules of each metric's increase over every window, summed by ``group`` (labelled ``window``).

    Only the shortest window reads the raw counters. Each longer window is the recorded window of half its length
    now plus the same record ``offset`` half its length: two lookups, the two halves tiling the window, so every
    raw minute is counted once (WINDOWS double). The records of one group share its evaluation times, so the
    offset lands on an earlier evaluation's sample."""
    assert all(b == 2 * a for a, b in zip(WINDOWS, WINDOWS[1:])), WINDOWS
    lines: list[str] = []
    for part, metric in metrics.items():
        name = f"{prefix}_{part}:window"
        lines += [
            f"      - record: {name}",
            f"        expr: sum by ({group}) (increase({metric}[{WINDOWS[0]}m]))",
            f"        labels: {{window: {WINDOWS[0]}m}}",
        ]
        for half, w in zip(WINDOWS, WINDOWS[1:]):
            sel = f'{name}{{window="{half}m"}}'
            lines += [f"      - record: {name}", f"        expr: {sel} + {sel} offset {half}m",
                      f"        labels: {{window: {w}m}}"]
    return lines


SCORE_METRICS = {
    "count": "context_precision_score_count",
    "sum": "context_precision_score_sum",
    "squares": "context_precision_score_squares_total",
}


def rules(margin: float = MARGIN, z: float = Z, min_count: int = MIN_COUNT, level_sd: float = LEVEL_SD) -> str:
    """The rule file's text."""
    p = PREFIX
    metrics = SCORE_METRICS
    windows = ", ".join(f"{w}m" for w in WINDOWS)
    lines = [
        "# cp-observe — drop detection: sampled MAP over doubling windows against the same windows on the last",
        f"# {BASELINE_DAYS} days at the same time of day. GENERATED by deploy/prometheus/detection_rules.py"
        + (f" --margin {margin}" if margin != MARGIN else "")
        + (f" --level-sd {level_sd}" if level_sd != LEVEL_SD else "")
        + (f" --z {z}" if z != Z else "")
        + (f" --min-count {min_count}" if min_count != MIN_COUNT else "")
        + " (do not edit: regenerate).",
        f"# Windows: {windows}. Baseline: offsets 1d..{BASELINE_DAYS}d, pooled. Level SD {level_sd}, margin {margin},"
        f" z > {z} (the whole",
        f"# family: about {FALSE_ALARMS_PER_MONTH} false alarm per data source per month under no change), minimum"
        f" {min_count} scored",
        "# evaluations in the window and in the baseline. The script's docstring derives z; deploy/README.md",
        "# (Runbook: ContextPrecisionMAPRegression) and docs/how-to/alerts-and-runbooks.md explain what to tune.",
        "",
        "groups:",
        "  - name: context_precision.detection.recording",
        f"    interval: {INTERVAL}",
        "    rules:",
        "      # Per data source and window (the rule's label window): count, sum and sum of squares of AP over the window.",
    ]
    lines += window_records(p, metrics, DS)
    lines += _cascade_window_records()
    lines += _plain_records(margin, min_count, level_sd)
    lines += _ppi_records(margin, min_count, level_sd)
    lines += _chosen_records(z, min_count)
    lines += [
        "",
        "  - name: context_precision.detection.baseline",
        f"    interval: {BASELINE_INTERVAL}",
        "    rules:",
        f"      # Every window at the same time of day on each of the last {BASELINE_DAYS} days, pooled (the window"
        " records'",
        f"      # offsets: every window in one rule), and what depends on the pool alone. Every {BASELINE_INTERVAL}, not"
        " every minute:",
        "      # the pool moves by a few minutes of seven days, and its reads cost more than the rest of the scan.",
    ]
    for part in metrics:
        lines += [f"      - record: {p}_{part}:baseline", f"        expr: {_baseline(f'{p}_{part}:window')}"]
    lines += _plain_baseline_records()
    lines += _ppi_baseline_records()
    top = f'topk(1, {p}:drop_z{{{DS}=\\"%s\\"}})'  # inside a template's string: quotes escaped
    pick = f'{{{{ with query (printf "{top}" $labels.{DS}) }}}}{{{{ with first . }}}}'
    lines += [
        "",
        "  - name: context_precision.detection.alerts",
        f"    interval: {INTERVAL}",
        "    rules:",
        "      - alert: ContextPrecisionMAPRegression",
        "        expr: |",
        f"          {DS}:context_precision_score:drop_z_max > {z}",
        "        labels:",
        "          severity: warning",
        "        annotations:",
        f"          summary: 'Context precision of {{{{ $labels.{DS} }}}} dropped below its baseline"
        f" (scan statistic {{{{ $value | printf \"%.1f\" }}}} > {z})'",
        "          description: >-",
        f"            {pick}Over the last {{{{ .Labels.window }}}}, the sampled MAP of retriever"
        f" {{{{ $labels.{DS} }}}} is below its baseline (the same {{{{ .Labels.window }}}} at this time of day"
        f" on the last {BASELINE_DAYS} days)",
        f"            at z = {{{{ .Value | printf \"%.1f\" }}}} > {z} ({_spread(level_sd, margin)}).{{{{ end }}}}"
        "{{ end }}",
        f"            {{{{ with query (printf \"{p}:drop{{{DS}=\\\"%s\\\"}} and on ({DS}, window) {top}\""
        f" $labels.{DS} $labels.{DS}) }}}}{{{{ with first . }}}}Estimated drop {{{{ .Value | printf \"%.3f\" }}}}"
        "{{ end }}{{ end }}",
        f"            {{{{ with query (printf \"{INTERVAL_Z} * {p}:drop_stderr{{{DS}=\\\"%s\\\"}} and on ({DS}, window)"
        f" {top}\" $labels.{DS} $labels.{DS}) }}}}{{{{ with first . }}}}± {{{{ .Value | printf \"%.3f\" }}}}"
        " (95%){{ end }}{{ end }}",
        f"            {{{{ with query (printf \"{p}:baseline_mean{{{DS}=\\\"%s\\\"}} and on ({DS}, window) {top}\""
        f" $labels.{DS} $labels.{DS}) }}}}{{{{ with first . }}}}from a baseline MAP of {{{{ .Value | printf \"%.3f\" }}}}"
        "{{ end }}{{ end }},",
        f"            {{{{ with query (printf \"{p}:evaluations{{{DS}=\\\"%s\\\"}} and on ({DS}, window) {top}\""
        f" $labels.{DS} $labels.{DS}) }}}}{{{{ with first . }}}}on {{{{ .Value | printf \"%.0f\" }}}} scored"
        " evaluations{{ end }}{{ end }}",
        f"            {{{{ with query (printf \"{p}:baseline_evaluations{{{DS}=\\\"%s\\\"}} and on ({DS}, window) {top}\""
        f" $labels.{DS} $labels.{DS}) }}}}{{{{ with first . }}}}against {{{{ .Value | printf \"%.0f\" }}}} in"
        " the baseline.{{ end }}{{ end }}",
        "            Look for an index, embedding, ranking or judge change deployed before the window began (the"
        " dashboard marks judge changes);",
        "            the worst evaluations of the window are the exemplars on the dashboard's MAP panels, or Jaeger"
        " tag gen_ai.evaluation.score.label=fail.",
        f"          dashboard: '/d/cp-observe-context-precision/context-precision?var-data_source="
        f"{{{{ $labels.{DS} }}}}'",
        "          runbook_url: 'deploy/README.md#runbook-contextprecisionmapregression'",
        "",
    ]
    return "\n".join(lines)



#: The groups ``--shard`` splits by data source: every group that computes per data source.
SHARDED = ("context_precision.detection.recording", "context_precision.detection.baseline")


def shard(text: str, shards: list[str], group: str = SHARDED[0]) -> str:
    """``text`` (a generated rule file) with its recording ``group`` split by data source: one group per regex of
    ``shards`` (data source ids, anchored as PromQL anchors =~) and one for the data sources no regex matches.

    Every raw counter and every record the group reads gets the shard's matcher on the data source, so each group
    computes its own data sources only and writes series no other group writes (``main`` shards the recording and
    the baseline group alike: SHARDED). PromQL has no hash, so a shard is
    a list the user keeps (regexes of data source ids); the last group catches the rest, so a new data source is
    never left out. Groups run independently: Prometheus evaluates them in parallel (up to its rule concurrency),
    a Mimir or Thanos ruler spreads them over its rulers.
    """
    lines = text.split("\n")
    start = lines.index(f"  - name: {group}")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("  - name: "))
    body = lines[start + 1:end]
    while body and not body[-1].strip():
        body.pop()
    # every record of the file, not only the group's own: the recording group reads the baseline group's too
    names = sorted({line.split("record: ", 1)[1] for line in lines if "- record: " in line}, key=len, reverse=True)
    record = re.compile(r"(?<![\w:])(" + "|".join(re.escape(n) for n in names) + r")(?![\w:])(\{[^}]*\})?")
    raw = re.compile(r"increase\((\w+)\[")

    def rewrite(line: str, matcher: str) -> str:
        if "- record: " in line or line.lstrip().startswith("#") or "labels:" in line:
            return line
        line = record.sub(lambda m: f"{m[1]}{{{m[2][1:-1] + ',' if m[2] else ''}{matcher}}}", line)
        return raw.sub(lambda m: f"increase({m[1]}{{{matcher}}}[", line)

    out = lines[:start]
    every = "|".join(f"(?:{s})" for s in shards)
    for number, matcher in [*((k, f'{DS}=~"{s}"') for k, s in enumerate(shards, start=1)),
                            (0, f'{DS}!~"{every}"')]:
        out.append(f"  - name: {group}.{'shard' + str(number) if number else 'rest'}")
        out += [rewrite(line, matcher) for line in body]
        out.append("")
    return "\n".join(out + lines[end:])


def _spread(level_sd: float, margin: float) -> str:
    """What the description says of the level's spread and the margin."""
    return f"level SD {level_sd}" + (f", margin {margin}" if margin else "")


def _plain_records(margin: float, min_count: int, level_sd: float) -> list[str]:
    """The score series' drop per window: means, the drop, its standard error from the baseline's variance, z."""
    p, q = PREFIX, f"{PREFIX}_plain"
    on = f"on ({DS}, window)"
    return [
        "      # The score series: means, the drop (baseline - window), its standard error from the baseline's",
        "      # variance, and z.",
        f"      - record: {q}:mean",
        f"        expr: {p}_sum:window / {on} {p}_count:window",
        f"      - record: {q}:drop",
        f"        expr: {q}:baseline_mean - {on} {q}:mean",
        f"      - record: {q}:drop_stderr",
        "        expr: |",
        "          sqrt(",
        f"            clamp_min({p}_squares:baseline / {on} {p}_count:baseline - {on} {q}:baseline_mean ^ 2, {VAR_FLOOR})",
        f"            * on ({DS}, window) (1 / {p}_count:window + {on} 1 / {p}_count:baseline)",
        f"            + {level_sd ** 2!r}",
        "          )",
        f"      - record: {q}:drop_z",
        "        expr: |",
        f"          ({q}:drop - {margin}) / {on} {q}:drop_stderr",
        f"          and {on} {p}_count:window >= {min_count}",
        f"          and {on} {p}_count:baseline >= {min_count}",
    ]


def _plain_baseline_records() -> list[str]:
    """The score series' baseline mean (the baseline group: it reads the pool alone)."""
    p, q = PREFIX, f"{PREFIX}_plain"
    return [f"      - record: {q}:baseline_mean",
            f"        expr: {p}_sum:baseline / on ({DS}, window) {p}_count:baseline"]


def _terms(side: str) -> list[str]:
    """One series per PPI term of the cascade's ``side`` (window or baseline) record."""
    return [line for term in PPI_TERMS
            for line in (f"      - record: {CASCADE}_{term}:{side}",
                         f'        expr: sum without (term) ({CASCADE_TERMS}:{side}{{term="{term}"}})')]


def _cascade_window_records() -> list[str]:
    """The cascade's PPI sums over every window (doubling records, all terms in one), then one series per term."""
    return [
        "      # Where the cheap-plus-LLM cascade runs: its PPI sums (context_precision_cascade_sums_total{term}) over",
        "      # every window (doubling records, all terms in one), then one series per term.",
        *(line.replace(f"{CASCADE_TERMS}_:", f"{CASCADE_TERMS}:")
          for line in window_records(CASCADE_TERMS, {"": CASCADE_METRIC}, f"{DS}, term")),
        *_terms("window"),
    ]


def _ppi_baseline_records() -> list[str]:
    """The cascade's pooled baseline, one series per term, its moments and PPI++ weight (the baseline group)."""
    c, q = CASCADE, f"{PREFIX}_ppi"
    on = f"on ({DS}, window)"

    def t(term: str) -> str:
        return f"{c}_{term}:baseline"

    b_unl = f"{c}_unlabelled:baseline"
    return [
        "      # The cascade's PPI sums over the same baseline, then one series per term.",
        f"      - record: {CASCADE_TERMS}:baseline",
        f"        expr: {_baseline(f'{CASCADE_TERMS}:window', f'{DS}, term')}",
        *_terms("baseline"),
        "      # The baseline's moments and PPI++ weight (as cp_observe/_judging/_ppi.py: ppi_drop_z): N = count - n",
        "      # unlabelled; lambda = clamp(cov(y, f_sub) / ((1 + n/N) var(f)), 0, 1), 0 without unlabelled items or",
        "      # when f is constant.",
        f"      - record: {b_unl}",
        f"        expr: {t('count')} - {on} {t('n')}",
        f"      - record: {c}_y:baseline_mean",
        f"        expr: {t('y')} / {on} {t('n')}",
        f"      - record: {c}_f_sub:baseline_mean",
        f"        expr: {t('f_sub')} / {on} {t('n')}",
        f"      - record: {c}_fy:baseline_cov",
        f"        expr: {t('fy')} / {on} {t('n')} - {on} {c}_y:baseline_mean * {on}"
        f" {c}_f_sub:baseline_mean",
        f"      - record: {c}_f:baseline_var",
        "        expr: |",
        f"          clamp_min(({t('f2')} - {on} {t('f')} ^ 2 / {on} {t('count')})"
        f" / {on} clamp_min({t('count')} - 1, 1), 0)",
        f"      - record: {q}:lambda",
        "        expr: |",
        "          (",
        f"            clamp({c}_fy:baseline_cov / {on} ((1 + {t('n')} / {on} clamp_min({b_unl}, 1))"
        f" * {on} {c}_f:baseline_var), 0, 1)",
        f"            and {on} {c}_f:baseline_var > 0 and {on} {b_unl} > 0.5",
        "          )",
        f"          or 0 * {c}_fy:baseline_cov",
        f"      - record: {c}_f_unlabelled:baseline_mean",
        "        expr: |",
        f"          ({t('f')} - {on} {t('f_sub')}) / {on} {b_unl} and {on} {b_unl} > 0.5",
        f"          or {c}_f_sub:baseline_mean",
        f"      - record: {c}_f_unlabelled:baseline_var",
        "        expr: |",
        f"          clamp_min(({t('f2')} - {on} {t('f2_sub')}) / {on} {b_unl}"
        f" - {on} {c}_f_unlabelled:baseline_mean ^ 2, 0) and {on} {b_unl} > 0.5",
        f"          or 0 * {c}_f_sub:baseline_mean",
        f"      - record: {q}:residual_var",
        "        expr: |",
        "          clamp_min(",
        f"            {t('y2')} / {on} {t('n')} - {on} {c}_y:baseline_mean ^ 2",
        f"            + {on} {q}:lambda ^ 2 * {on} ({t('f2_sub')} / {on} {t('n')}"
        f" - {on} {c}_f_sub:baseline_mean ^ 2)",
        f"            - {on} 2 * {q}:lambda * {on} {c}_fy:baseline_cov,",
        f"            {VAR_FLOOR}",
        "          )",
        "      # The baseline's mean with its weight.",
        f"      - record: {q}:baseline_mean",
        f"        expr: {c}_y:baseline_mean + {on} {q}:lambda * {on} ({c}_f_unlabelled:baseline_mean - {on}"
        f" {c}_f_sub:baseline_mean)",
    ]


def _ppi_records(margin: float, min_count: int, level_sd: float) -> list[str]:
    """Where the cascade runs: the PPI++ MAP per window against the baseline's (the baseline group's weight)."""
    c, q = CASCADE, f"{PREFIX}_ppi"
    on = f"on ({DS}, window)"

    def t(term: str, side: str) -> str:
        return f"{c}_{term}:{side}"

    b_unl = f"{c}_unlabelled:baseline"
    return [
        "      # The window's mean with the baseline's weight; its unlabelled mean is its f_sub's where it has none.",
        f"      - record: {c}_unlabelled:window",
        f"        expr: {t('count', 'window')} - {on} {t('n', 'window')}",
        f"      - record: {c}_f_sub:mean",
        f"        expr: {t('f_sub', 'window')} / {on} {t('n', 'window')}",
        f"      - record: {q}:mean",
        "        expr: |",
        f"          {t('y', 'window')} / {on} {t('n', 'window')}",
        f"          + {on} {q}:lambda * {on} (",
        "            (",
        f"              ({t('f', 'window')} - {on} {t('f_sub', 'window')}) / {on} {c}_unlabelled:window"
        f" and {on} {c}_unlabelled:window > 0.5",
        f"              or {c}_f_sub:mean",
        "            )",
        f"            - {on} {c}_f_sub:mean",
        "          )",
        f"      - record: {q}:drop",
        f"        expr: {q}:baseline_mean - {on} {q}:mean",
        f"      - record: {q}:drop_stderr",
        "        expr: |",
        "          sqrt(",
        f"            {q}:residual_var * {on} (1 / {t('n', 'window')} + {on} 1 / {t('n', 'baseline')})",
        f"            + {on} {q}:lambda ^ 2 * {on} {c}_f_unlabelled:baseline_var",
        f"              * {on} (1 / clamp_min({c}_unlabelled:window, 1) + {on} 1 / clamp_min({b_unl}, 1))",
        f"            + {level_sd ** 2!r}",
        "          )",
        f"      - record: {q}:drop_z",
        "        expr: |",
        f"          ({q}:drop - {margin}) / {on} {q}:drop_stderr",
        f"          and {on} {t('n', 'window')} >= {min_count}",
        f"          and {on} {t('n', 'baseline')} >= {min_count}",
    ]


def _chosen_records(z: float, min_count: int) -> list[str]:
    """Per data source and window, the PPI++ figures where they judge, else the score series' where the window holds
    no cascade evaluation (so a cascade turned off leaves the short windows to the score series at once)."""
    p, c = PREFIX, CASCADE
    on = f"on ({DS}, window)"
    plain_ok = f"({p}_plain:drop_z unless {on} {c}_count:window > 0)"
    lines = [
        "      # What the alert reads, per data source and window: the PPI++ figures where they judge (at least"
        f" {min_count}",
        "      # LLM-judged evaluations in the window and in the baseline), else the score series' where the window"
        " holds",
        "      # no cascade evaluation; neither in a window whose cascade has too few (the first day after it is"
        " turned on).",
        f"      - record: {p}:drop_z",
        f"        expr: {p}_ppi:drop_z or {plain_ok}",
    ]
    for name in ("drop", "drop_stderr", "baseline_mean", "mean"):
        lines += [f"      - record: {p}:{name}",
                  f"        expr: ({p}_ppi:{name} and {on} {p}_ppi:drop_z) or ({p}_plain:{name} and {on} {plain_ok})"]
    for name, ppi, plain in (("evaluations", f"{c}_n:window", f"{p}_count:window"),
                             ("baseline_evaluations", f"{c}_n:baseline", f"{p}_count:baseline")):
        lines += [f"      - record: {p}:{name}",
                  f"        expr: ({ppi} and {on} {p}_ppi:drop_z) or ({plain} and {on} {plain_ok})"]
    lines += [
        f"      # The family's statistic per data source (the dashboard plots it against {z}).",
        f"      - record: {DS}:context_precision_score:drop_z_max",
        f"        expr: max by ({DS}) ({p}:drop_z)",
    ]
    return lines


# --- promtool scenarios: deploy/prometheus/tests/context_precision_detection.test.yml ------------------------------

DAY_MIN = 1440
SCENARIO_DAYS = 9  # the checks fall on day 8, when every baseline window lies within the data
CASCADE_DAYS = 3  # the cascade's scenarios: checked on day 2, against a pool of the two days before
STEP_MIN = 5  # the scenarios' scrape interval
EVAL_MIN = 5  # their evaluation interval: the scrape's, so each window record finds its earlier half
LABELS = ('{job="rag-app",instance="pod-1",otel_scope_name="cp_observe",gen_ai_evaluation_name="context_precision",'
          'gen_ai_data_source_id="kb",stage="retrieval"}')


def daily_mean(minute: int) -> float:
    """The scenarios' healthy MAP: 0.625, 0.0625 higher by day and lower by night (binary fractions: exact sums)."""
    return 0.625 + 0.0625 * round(math.sin(2 * math.pi * (minute // 60) / 24))


def _counters(per_minute: float, mean_at, days: int = SCENARIO_DAYS) -> list[list[float]]:
    """Cumulative count, sum and squares at every STEP_MIN (scores 0 or 1, so squares grow like sums)."""
    count = total = 0.0
    out: list[list[float]] = [[0.0], [0.0], [0.0]]
    for minute in range(0, days * DAY_MIN, STEP_MIN):
        count += per_minute * STEP_MIN
        total += per_minute * STEP_MIN * mean_at(minute)
        for series, value in zip(out, (count, total, total)):
            series.append(value)
    return out


CASCADE_JUDGED = 4  # the cascade scenarios' evaluations a minute judged by both judges (as many by the cheap one alone)


def _cascade_counters(mean_y_at, mean_f_at, off_from: int | None = None, days: int = CASCADE_DAYS
                      ) -> tuple[dict[str, list[float]], list[list[float]]]:
    """Cumulative PPI sums by term, and the score series the library records beside them (the LLM's AP where it
    judged, the cheap judge's elsewhere), at every STEP_MIN. Scores are 0 or 1; the two judges disagree on 1/16
    of the LLM-judged evaluations more than their means require. From ``off_from`` the cascade is off: its sums
    stay where they were and the LLM judges every evaluation."""
    k = CASCADE_JUDGED * STEP_MIN
    terms = {t: [0.0] for t in PPI_TERMS}
    plain: list[list[float]] = [[0.0], [0.0], [0.0]]
    for minute in range(0, days * DAY_MIN, STEP_MIN):
        y, f = mean_y_at(minute), mean_f_at(minute)
        on = off_from is None or minute < off_from
        step = {"count": 2 * k, "f": 2 * k * f, "f2": 2 * k * f, "n": k, "y": k * y, "y2": k * y,
                "f_sub": k * f, "f2_sub": k * f, "fy": k * (min(y, f) - 0.0625)}
        for t, series in terms.items():
            series.append(series[-1] + (step[t] if on else 0.0))
        scored = k * (y + f) if on else 2 * k * y
        for series, add in zip(plain, (2 * k, scored, scored)):
            series.append(series[-1] + add)
    return terms, plain


def _values(series: list[float]) -> str:
    """promtool's expanding notation, one segment per run of equal steps."""
    parts, i = [], 0
    while i < len(series) - 1:
        step, j = series[i + 1] - series[i], i + 1
        while j < len(series) - 1 and series[j + 1] - series[j] == step:
            j += 1
        parts.append(f"{series[i]!r}+{step!r}x{j - i - 1}" if j - i > 1 else repr(series[i]))
        i = j if j - i > 1 else i + 1
    if i == len(series) - 1:
        parts.append(repr(series[-1]))
    return " ".join(parts)


_RECORDS: dict[int, tuple[list[float], dict[int, list[float | None]]]] = {}


def recorded_window(series: list[float], w: int) -> list[float | None]:
    """The window record of length ``w`` at every step, built as the rules build it: the shortest window's
    increase (the counter's difference: the scenarios' samples fall on the window's edges), then each longer one
    as the half-length record now plus the same record half a window earlier; None where that reaches before the
    data (the rules have no record there)."""
    held = _RECORDS.get(id(series))
    if held is None or held[0] is not series:
        if len(_RECORDS) > 512:
            _RECORDS.clear()
        held = _RECORDS[id(series)] = (series, {})
    cache = held[1]
    if w not in cache:
        out: list[float | None] = [None] * len(series)
        if w == WINDOWS[0]:
            back = w // STEP_MIN
            for i in range(back, len(series)):
                out[i] = series[i] - series[i - back]
        else:
            half, back = recorded_window(series, w // 2), w // 2 // STEP_MIN
            for i in range(back, len(series)):
                a, b = half[i], half[i - back]
                out[i] = None if a is None or b is None else a + b
        cache[w] = out
    return cache[w]


def _window_sums(series: list[float], at: int, back: int) -> tuple[float | None, float | None]:
    """(this window's record, the pooled baseline's: the record on each of the last BASELINE_DAYS days that has one)
    of one cumulative series at step ``at``, for a window of ``back`` steps; None where there is none."""
    day = DAY_MIN // STEP_MIN
    record = recorded_window(series, back * STEP_MIN)
    days = [record[at - d * day] for d in range(1, BASELINE_DAYS + 1) if at - d * day >= 0]
    present = [v for v in days if v is not None]
    return record[at], (sum(present) if present else None)


def _plain_z(counters: list[list[float]], at: int, back: int) -> tuple[float, float, float, float, float, float] | None:
    """(z, drop, SE, baseline mean, n, N) of the score series over one window."""
    (n, big_n), (s, big_s), (_, big_q) = (_window_sums(c, at, back) for c in counters)
    if n is None or big_n is None or s is None or big_s is None or big_q is None:
        return None
    if n < MIN_COUNT or big_n < MIN_COUNT:
        return None
    base = big_s / big_n
    drop = base - s / n
    se = math.sqrt(max(big_q / big_n - base**2, VAR_FLOOR) * (1 / n + 1 / big_n) + LEVEL_SD**2)
    return (drop - MARGIN) / se, drop, se, base, n, big_n


def _ppi_z(terms: dict[str, list[float]], at: int, back: int) -> tuple[float, float, float, float, float, float] | None:
    """(z, drop, SE, baseline mean, n, n_b) of the cascade's PPI++ MAP over one window (as _judging/_ppi.py)."""
    w, b = ({t: _window_sums(series, at, back)[k] for t, series in terms.items()} for k in (0, 1))
    if None in w.values() or None in b.values():
        return None
    if w["n"] < MIN_COUNT or b["n"] < MIN_COUNT:
        return None
    n_b, unl_b = b["n"], b["count"] - b["n"]
    mean_y, mean_fs = b["y"] / n_b, b["f_sub"] / n_b
    cov = b["fy"] / n_b - mean_y * mean_fs
    var_f = max((b["f2"] - b["f"] ** 2 / b["count"]) / max(b["count"] - 1, 1), 0.0)
    lam = min(max(cov / ((1 + n_b / unl_b) * var_f), 0.0), 1.0) if var_f > 0 and unl_b > 0.5 else 0.0
    mean_fu = (b["f"] - b["f_sub"]) / unl_b if unl_b > 0.5 else mean_fs
    var_fu = max((b["f2"] - b["f2_sub"]) / unl_b - mean_fu**2, 0.0) if unl_b > 0.5 else 0.0
    residual = max(b["y2"] / n_b - mean_y**2 + lam**2 * (b["f2_sub"] / n_b - mean_fs**2) - 2 * lam * cov, VAR_FLOOR)
    base = mean_y + lam * (mean_fu - mean_fs)
    n, unl = w["n"], w["count"] - w["n"]
    w_fs = w["f_sub"] / n
    w_fu = (w["f"] - w["f_sub"]) / unl if unl > 0.5 else w_fs
    drop = base - (w["y"] / n + lam * (w_fu - w_fs))
    se = math.sqrt(residual * (1 / n + 1 / n_b) + lam**2 * var_fu * (1 / max(unl, 1) + 1 / max(unl_b, 1))
                   + LEVEL_SD**2)
    return (drop - MARGIN) / se, drop, se, base, n, n_b


def evaluate(counters: list[list[float]], minute: int, terms: dict[str, list[float]] | None = None
             ) -> tuple[float, int, float, float, float, float, float] | None:
    """The rules at ``minute`` (a multiple of STEP_MIN): (z, window, drop, SE, baseline mean, n, N) of the
    largest z, or None. ``increase`` over a window whose edges are samples is their difference. With the
    cascade's PPI sums (``terms``), a window is judged on the PPI++ figures where they judge (n and N are then the
    LLM-judged counts), on the score series' where the window holds no cascade evaluation, else not at all."""
    at = minute // STEP_MIN
    best = None
    for w in WINDOWS:
        back = w // STEP_MIN
        found = _ppi_z(terms, at, back) if terms else None
        if found is None and not (terms and (_window_sums(terms["count"], at, back)[0] or 0) > 0):
            found = _plain_z(counters, at, back)
        if found is not None and (best is None or found[0] > best[0]):
            best = (found[0], w, *found[1:])
    return best


def _annotations(source: str, found: tuple) -> tuple[str, str]:
    z, w, drop, se, base, n, big_n = found
    summary = f"Context precision of {source} dropped below its baseline (scan statistic {z:.1f} > {Z})"
    description = (
        f"Over the last {w}m, the sampled MAP of retriever {source} is below its baseline (the same {w}m at this"
        f" time of day on the last {BASELINE_DAYS} days) at z = {z:.1f} > {Z} ({_spread(LEVEL_SD, MARGIN)})."
        f" Estimated drop {drop:.3f} ± {INTERVAL_Z * se:.3f} (95%) from a baseline MAP of {base:.3f}, on {n:.0f}"
        f" scored evaluations against {big_n:.0f} in the baseline. " + _ADVICE
    )
    return summary, description


_ADVICE = ("Look for an index, embedding, ranking or judge change deployed before the window began (the dashboard"
           " marks judge changes); the worst evaluations of the window are the exemplars on the dashboard's MAP"
           " panels, or Jaeger tag gen_ai.evaluation.score.label=fail.")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _test_group(title: str, counters: dict[str, list[list[float]]], terms: dict[str, dict[str, list[float]]],
                times: list[int]) -> list[str]:
    """One promtool test group: its input series and the alert's expected state at ``times`` (from ``evaluate``)."""
    lines = [f"  - name: {title}", f"    interval: {STEP_MIN}m", "    input_series:"]
    for name, series_set in counters.items():
        labels = LABELS.replace('"kb"', f'"{name}"')
        for metric, series in zip(("context_precision_score_count", "context_precision_score_sum",
                                   "context_precision_score_squares_total"), series_set):
            lines += [f"      - series: '{metric}{labels}'", f"        values: '{_values(series)}'"]
    for name, series_by_term in terms.items():
        for term, series in series_by_term.items():
            labels = LABELS.replace('"kb"', f'"{name}"').replace(',stage="retrieval"', f',term="{term}"')
            lines += [f"      - series: '{CASCADE_METRIC}{labels}'", f"        values: '{_values(series)}'"]
    lines.append("    alert_rule_test:")
    for minute in times:
        fired = [(name, found) for name in counters
                 if (found := evaluate(counters[name], minute, terms.get(name))) is not None and found[0] > Z]
        if not fired:
            lines.append(f"      - {{eval_time: {minute}m, alertname: ContextPrecisionMAPRegression, exp_alerts: []}}")
            continue
        lines += [f"      - eval_time: {minute}m", "        alertname: ContextPrecisionMAPRegression",
                  "        exp_alerts:"]
        for name, found in fired:
            summary, description = _annotations(name, found)
            lines += [
                f"          - exp_labels: {{severity: warning, gen_ai_data_source_id: {name}}}",
                "            exp_annotations:",
                f"              summary: {_quote(summary)}",
                f"              description: {_quote(description)}",
                f"              dashboard: '/d/cp-observe-context-precision/context-precision?var-data_source={name}'",
                "              runbook_url: 'deploy/README.md#runbook-contextprecisionmapregression'",
            ]
    return lines


def scenarios() -> str:
    """The promtool test file: quiet on the daily pattern and under the minimum; fires on a step and a drift.

    Two test groups, checked where each change first fires and one evaluation before. The score series' sources run
    SCENARIO_DAYS (the full seven-day pool); the cascade's, whose nine PPI sums per data source are most of what
    promtool evaluates at each step, run CASCADE_DAYS: their pool holds the days there are, as a new installation's
    does, and the promtool run takes about half the time it would with the cascade over nine days too.
    """
    def changes(days: int) -> tuple[int, range]:
        return (days - 1) * DAY_MIN + 12 * 60, range((days - 1) * DAY_MIN, days * DAY_MIN, EVAL_MIN)

    change, last_day = changes(SCENARIO_DAYS)
    sources = {
        "steady": (4, daily_mean),
        "step": (4, lambda m: daily_mean(m) - (0.25 if m >= change else 0)),
        "drift": (4, lambda m: daily_mean(m) - 0.015625 * min(max((m - change) // 60 + 1, 0), 6)),
        "thin": (0.75 / 60, lambda m: daily_mean(m) - (0.5 if m >= change else 0)),
    }
    counters = {name: _counters(per_minute, mean_at) for name, (per_minute, mean_at) in sources.items()}
    # The cascade: steady; and a drop of 0.25 the cheap judge does not see (its scores stay where they were), so
    # the score series, mostly the cheap judge's, drops by half of it while the PPI++ MAP drops by all of it.
    c_change, c_last_day = changes(CASCADE_DAYS)
    cascades = {
        "cascade_steady": _cascade_counters(daily_mean, daily_mean),
        "cascade_blind": _cascade_counters(lambda m: daily_mean(m) - (0.25 if m >= c_change else 0), daily_mean),
        # The cascade turned off at midnight: windows without its evaluations fall back on the score series.
        "cascade_off": _cascade_counters(lambda m: daily_mean(m) - (0.25 if m >= c_change else 0), daily_mean,
                                         off_from=(CASCADE_DAYS - 1) * DAY_MIN),
    }
    c_counters = {name: plain for name, (_, plain) in cascades.items()}
    terms = {name: by_term for name, (by_term, _) in cascades.items()}

    def firing(name: str, minute: int) -> tuple | None:
        found = evaluate({**counters, **c_counters}[name], minute, terms.get(name))
        return found if found is not None and found[0] > Z else None

    for name, day in (("steady", last_day), ("thin", last_day), ("cascade_steady", c_last_day)):
        assert not any(firing(name, m) for m in day), name
    assert not any(firing(name, m) for name in counters for m in last_day if m < change)
    assert not any(firing(name, m) for name in c_counters for m in c_last_day if m < c_change)
    firsts = {name: next(m for m in last_day if m >= change and firing(name, m)) for name in ("step", "drift")}
    c_firsts = {name: next(m for m in c_last_day if m >= c_change and firing(name, m))
                for name in ("cascade_blind", "cascade_off")}
    # The alert reports the PPI++ figures: the score series alone would report another drop.
    ppi, plain_only = evaluate(c_counters["cascade_blind"], c_firsts["cascade_blind"], terms["cascade_blind"]), \
        evaluate(c_counters["cascade_blind"], c_firsts["cascade_blind"])
    assert ppi is not None and plain_only is not None and abs(ppi[2] - plain_only[2]) > 0.05

    def times(at: int, first: dict[str, int]) -> list[int]:
        return sorted({at - EVAL_MIN, at + 6 * 60, *first.values(), *(m - EVAL_MIN for m in first.values())})

    lines = [
        "# promtool unit tests for rules/context_precision_detection.rules.yml (ContextPrecisionMAPRegression).",
        "# GENERATED by deploy/prometheus/detection_rules.py --tests (do not edit: regenerate). The expected",
        "# firing times and annotations are the generator's own arithmetic (evaluate), so rules that compute",
        "# anything else fail here. Scores are 0 or 1 (squares grow like sums); MAP follows a daily pattern (0.5625",
        "# at night, 0.6875 by day: binary fractions, so sums are exact), 4 scored evaluations a minute.",
        f"# Group 1, {SCENARIO_DAYS} days (every window's seven-day pool within the data), on day {SCENARIO_DAYS - 1}"
        " at 12:00: steady stays as it",
        "# was (quiet); step drops 0.25 (fires); drift slides 1/64 an hour for 6 h (fires); thin drops 0.5 at 0.75",
        "# evaluations an hour (under the minimum in every window: quiet).",
        f"# Group 2, {CASCADE_DAYS} days (the pool holds the days there are, as a new installation's), on day"
        f" {CASCADE_DAYS - 1} at 12:00: three run",
        f"# the cheap-plus-LLM cascade ({CASCADE_JUDGED} evaluations a minute judged by both judges, as many by the"
        " cheap one alone):",
        "# cascade_steady (quiet) and cascade_blind, whose LLM-judged MAP drops 0.25 while the cheap judge's does",
        "# not: it fires on the PPI++ figures, which the description reports (n, N: LLM-judged counts).",
        f"# cascade_off ran the cascade until day {CASCADE_DAYS - 1} 00:00, then the LLM judged every evaluation: its"
        " 0.25 drop at 12:00",
        "# fires on the score series of the windows that hold no cascade evaluation.",
        "",
        "rule_files:",
        "  - ../rules/context_precision_detection.rules.yml",
        "",
        f"evaluation_interval: {EVAL_MIN}m",
        "",
        "# Each group reads what the one before it wrote at the same instant (promtool evaluates every group at",
        "# every step, whatever its interval): without an order promtool evaluates the groups in a random one, and",
        "# a group sometimes reads the previous step's values.",
        "group_eval_order:",
        "  - context_precision.detection.baseline",
        "  - context_precision.detection.recording",
        "  - context_precision.detection.alerts",
        "",
        "tests:",
    ]
    lines += _test_group("steady daily pattern quiet, step and drift fire, too few evaluations quiet", counters, {},
                         times(change, firsts))
    lines += _test_group("the cascade's PPI++ (steady quiet, a drop only the LLM sees fires, a cascade turned off)",
                         c_counters, terms, times(c_change, c_firsts))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the rules."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--margin", type=float, default=MARGIN, help="the smallest drop that counts (MAP units)")
    parser.add_argument("--level-sd", type=float, default=LEVEL_SD,
                        help="how far a healthy day's MAP strays from the 7-day same-time baseline (SD, MAP units)")
    parser.add_argument("--z", type=float, default=Z, help="the family's threshold (higher: fewer false alarms)")
    parser.add_argument("--min-count", type=int, default=MIN_COUNT, help="scored evaluations a window needs")
    parser.add_argument("--tests", action="store_true", help="print the promtool scenarios for the defaults instead")
    parser.add_argument("--shard", action="append", default=[], metavar="REGEX",
                        help="a group for the data sources whose id matches REGEX (repeat; a last group takes the"
                             " rest)")
    args = parser.parse_args(argv)
    text = scenarios() if args.tests else rules(args.margin, args.z, args.min_count, args.level_sd)
    if args.shard and not args.tests:
        for group in SHARDED:
            text = shard(text, args.shard, group)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
