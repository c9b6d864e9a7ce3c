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
  that tile the window, so each raw minute counts once and an evaluation reads two samples, not W minutes. Every
  window is computed every minute, the long ones too: a long window's z crosses the threshold in brief excursions
  near it, and evaluated every 4 minutes (tried) it missed some, which put the median delay of a slow drift 14-20
  minutes later in 4 of 36 cells (benchmarks/README.md). The alert group takes the largest z over the windows; the
  alert's figures (drop, interval, baseline, counts) are queried when it is sent.
- **Baseline.** The same W at the same time of day on each of the last BASELINE_DAYS days: the window records at
  ``offset 1d`` .. ``offset 7d``, pooled: N, S, Q (seven lookups, not seven raw ranges). The pools, and what
  follows from them alone, are a group of their own evaluated every BASELINE_INTERVAL (they cost more than the rest
  of the scan together), each evaluation for the time of day BASELINE_LEAD_MIN minutes ahead (its offsets that much
  short of whole days: ``day_offset``), so the minutes that read it, through ``last_over_time`` (``_held``), see a
  pool at most that far off their time of day either way. Prometheus must keep
  9 days; ``cp-observe deploy backfill`` writes the records for past days where the rules are new. Same time of
  day follows the daily rhythm (query mix, traffic). A day with no data (a new data source) is left out of the
  pool rather than voiding it.
- **Weekly shift.** Seven days average the weekly rhythm out, so on a day above the week's mean the pool lies
  below today's level and a drop looks smaller by the difference (measured: a 0.1 drop took 2.6-2.7x Lorden's
  bound there). Today's weekday is the one BASELINE_DAYS days ago, so the pool's mean moves by how that day stood
  against the pool: over the longest window (the most evaluations: the rhythm is slow within a day), the gap
  g = S7/N7 - S/N between the longest window's record ``offset 7d`` and the pool's, shrunk by its noise with
  LEVEL_SD as the prior, shift = g LEVEL_SD^2 / (LEVEL_SD^2 + var(g)), var(g) = max(Q/N - (S/N)^2, VAR_FLOOR)
  (1/N7 - 1/N) (day 7 is one of the pool's days). A data source with few evaluations a day keeps most of the
  pool (its gap is mostly noise); a busy one takes the gap whole. No shift where that day holds fewer than
  MIN_COUNT evaluations (the first week). Five records, four of them one series per data source
  (``<DS>:context_precision_score_plain:weekly_*``), and the shifted mean, all in the baseline group (they read
  the pool and the record ``offset 7d`` alone, at the pool's minute); no raw reads and no longer retention (the
  records at ``offset 7d`` are the pool's).
- **Statistic.** drop = S/N + shift - s/n; its standard error uses the baseline's variance (the same under no
  change, and seven times the evidence of the window's), the shift's (var(g) times the weight squared) and the
  level's day-to-day spread, which no number of evaluations in the window removes:
  se = sqrt(max(Q/N - (S/N)^2, VAR_FLOOR) (1/n + 1/N) + var(shift) + LEVEL_SD^2);
  z = (drop - MARGIN) / se, kept only where n >= MIN_COUNT and N >= MIN_COUNT. With few evaluations the first term
  rules and a drop counts whole; with many, z is at most drop / LEVEL_SD, so what the shift leaves of the week's
  rhythm stays far below the threshold while a drop of 5 LEVEL_SD fires. MARGIN (0 by default) is for a user who
  wants drops smaller than it ignored however sure they are. The cascade's PPI++ figures below compare with the
  pool alone (no weekly shift yet).
- **Where the cheap-plus-LLM cascade runs.** The score series mix the LLM judge's AP (where it judged) with the
  cheap judge's, and a drop only the LLM can tell would move that mix by llm_share of itself. In a window whose
  cascade sums (``context_precision_cascade_sums_total{term}``) hold MIN_COUNT LLM-judged evaluations, and as many
  in its baseline, the window and its baseline compare the PPI++ MAP instead: the baseline's PPI++ weight lambda
  and variances, both means with that weight, se^2 = var(y - lambda f)(1/n + 1/n_b) + lambda^2 var(f)(1/N + 1/N_b)
  + LEVEL_SD^2, n counting LLM-judged evaluations (``cp_observe/_judging/_ppi.py``: ``ppi_drop_z``). The records
  the alert reads (``<PREFIX>:drop_z`` and its figures) are these where they judge, the score series' where the
  window holds no cascade evaluation (a cascade turned off), and none in a window whose cascade has too few.
- **Late LLM scores.** An evaluation reaches the counters when it is emitted: one the cheap judge alone scored at
  once, one the LLM judged (every term of it, its score too) when the LLM answers, seconds later on the standard
  tier, minutes on the flex tier. So a window's LLM-judged terms (n, y, ... and their share of count, f, f2)
  describe earlier retrievals than its cheap-only ones. ``--llm-offset`` (minutes; default by ``--judge-tier``:
  TIER_LLM_OFFSET) reads the cheap-only part (count - n, f - f_sub, f2 - f2_sub) that much earlier, in the window
  (its record ``offset`` that much) and in its baseline (a pool of its own, ``:baseline_early``, of the window
  records that much before each day's: the baseline group's own record ``offset`` that much would be the pool it
  wrote before, up to BASELINE_INTERVAL older), so both parts describe the same retrievals: a change the cheap
  judge sees is then compared with the LLM's scores of the same minutes. ``--query-offset`` (Prometheus >= 2.53's group ``query_offset``) moves
  every read of every group back alike: for samples that reach the TSDB late (remote write, a Mimir ruler), not for
  this.
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
LEVEL_SD = 0.01  # how far a healthy day's MAP strays from the 7-day same-time baseline once shifted for the weekday, SD
MIN_COUNT = 20  # scored evaluations in the window, and in the pooled baseline
VAR_FLOOR = 0.01  # AP variance is never taken below 0.1^2 (a constant baseline would give an infinite z)
FALSE_ALARMS_PER_MONTH = 0.5  # the design target for the family, per data source (the table shows the measured)
INTERVAL = "1m"
#: The baseline group's interval: the seven-day pools (the costliest reads by far) and what follows from them alone.
#: A divisor of a day, so each evaluation's offsets land on the 1-minute grid the window records are written on.
#: Longer than Prometheus's 5-minute lookback: every other group reads its records through ``last_over_time`` over
#: BASELINE_HOLD (``_held``). Each evaluation pools the time of day BASELINE_LEAD_MIN minutes ahead of it (its
#: offsets are that much short of whole days: the records there are days old), so over the minutes that read it
#: the pool's time of day is at most BASELINE_LEAD_MIN minutes off either way, as a 4-minute group's would be
#: behind.
DAY_MIN = 1440
BASELINE_EVERY_MIN = 8
BASELINE_INTERVAL = f"{BASELINE_EVERY_MIN}m"
BASELINE_LEAD_MIN = BASELINE_EVERY_MIN // 2
BASELINE_HOLD = f"{BASELINE_EVERY_MIN + 1}m"  # one minute more than the interval: an evaluation a little late
MONTH_MINUTES = 30 * 24 * 60
INTERVAL_Z = 1.96  # the estimated drop's interval in the annotations: 95 %, two-sided
DS = "gen_ai_data_source_id"
PREFIX = f"{DS}_window:context_precision_score"
WEEKLY = f"{DS}:context_precision_score_plain"  # the weekly shift's records: one series per data source
CASCADE_METRIC = "context_precision_cascade_sums_total"
CASCADE = f"{DS}_window:context_precision_cascade_sums"
CASCADE_TERMS = f"{DS}_term_window:context_precision_cascade_sums"
#: The cascade's PPI sums (cp_observe/_names.py, METRIC_CASCADE_SUMS): over all, then over the LLM-judged subsample.
PPI_TERMS = ("count", "f", "f2", "n", "y", "y2", "f_sub", "f2_sub", "fy")
#: The terms a window's PPI++ mean and its counts read (its variance terms come from the baseline).
WINDOW_TERMS = ("count", "f", "n", "y", "f_sub")
#: The terms over all evaluations, each with its LLM-judged part: the difference is what the cheap judge alone scored.
CHEAP_ONLY = (("count", "n"), ("f", "f_sub"), ("f2", "f2_sub"))
#: --llm-offset's default per --judge-tier (the library's judge_service_tier: flex, else standard), in minutes: how
#: much later an LLM-judged evaluation reaches the counters than one the cheap judge alone scored, as the rules'
#: 1-minute evaluations see it. Standard: a median of 4 s, under one evaluation: 0. Flex: a median of 2 min, a mean
#: of about 3.1 min from request to record (the 15-minute timeout's retries included; benchmarks/README.md, "Late
#: LLM scores in the cascade"): 3.
TIER_LLM_OFFSET = {"standard": 0, "flex": 3}
JUDGE_TIER = "standard"


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


def day_offset(days: int, lag: int = 0) -> str:
    """The baseline group's ``offset`` for ``days`` days back at its pool's time of day (BASELINE_LEAD_MIN minutes
    ahead of the evaluation), ``lag`` minutes earlier still: ``1d`` is ``23h56m`` with the 4-minute lead."""
    minutes = days * DAY_MIN - BASELINE_LEAD_MIN + lag
    d, rest = divmod(minutes, DAY_MIN)
    h, m = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((d, "d"), (h, "h"), (m, "m")) if n) or "0m"


def _baseline(record: str, by: str = DS, lag: int = 0) -> str:
    """The pooled baseline of every window at once: the window record on each of the last BASELINE_DAYS days at the
    pool's time of day (``day_offset``), summed (``lag`` minutes earlier still).

    A day whose record is missing (a data source newer than that day, or recordings younger than it) is left out
    of the pool rather than voiding it: a new installation compares with the days it has."""
    days = " or ".join(f'label_replace({record} offset {day_offset(d, lag)}, "day", "{d}", "", "")'
                       for d in range(1, BASELINE_DAYS + 1))
    return f"sum by ({by}, window) ({days})"


def _held(lines: list[str], names: set[str]) -> list[str]:
    """``lines`` (rules of a group other than the baseline group) with each read of a record in ``names`` (the
    baseline group's) as ``last_over_time(record[BASELINE_HOLD])``: the value it wrote last, which a plain read
    would find stale once Prometheus's 5-minute lookback has passed."""
    pattern = re.compile(r"(?<![\w:])(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
                         + r")(?![\w:])(\{[^}]*\})?")

    def rewrite(line: str) -> str:
        if "- record: " in line or line.lstrip().startswith("#"):
            return line
        return pattern.sub(lambda m: f"last_over_time({m[1]}{m[2] or ''}[{BASELINE_HOLD}])", line)
    return [rewrite(line) for line in lines]


def window_records(prefix: str, metrics: dict[str, str], group: str, windows: tuple[int, ...] = WINDOWS
                   ) -> list[str]:
    """Recording rules of each metric's increase over each of ``windows``, summed by ``group`` (labelled
    ``window``).

    Only the shortest window reads the raw counters. Each longer window is the recorded window of half its length
    now plus the same record ``offset`` half its length: two lookups, the two halves tiling the window, so every
    raw minute is counted once (WINDOWS double). The offset lands on an earlier evaluation's sample: the record
    of half the length is written every minute, or (the canary's long group) on an interval that divides every
    half it reads."""
    assert all(b == 2 * a for a, b in zip(WINDOWS, WINDOWS[1:])), WINDOWS
    lines: list[str] = []
    for part, metric in metrics.items():
        name = f"{prefix}_{part}:window"
        if WINDOWS[0] in windows:
            lines += [
                f"      - record: {name}",
                f"        expr: sum by ({group}) (increase({metric}[{WINDOWS[0]}m]))",
                f"        labels: {{window: {WINDOWS[0]}m}}",
            ]
        for half, w in zip(WINDOWS, WINDOWS[1:]):
            if w not in windows:
                continue
            sel = f'{name}{{window="{half}m"}}'
            lines += [f"      - record: {name}", f"        expr: {sel} + {sel} offset {half}m",
                      f"        labels: {{window: {w}m}}"]
    return lines


SCORE_METRICS = {
    "count": "context_precision_score_count",
    "sum": "context_precision_score_sum",
    "squares": "context_precision_score_squares_total",
}


def rules(margin: float = MARGIN, z: float = Z, min_count: int = MIN_COUNT, level_sd: float = LEVEL_SD,
          llm_offset: int = TIER_LLM_OFFSET[JUDGE_TIER], query_offset: str | None = None) -> str:
    """The rule file's text. ``llm_offset``: minutes the cascade's cheap-only terms are read earlier; ``query_offset``:
    the groups' ``query_offset`` (Prometheus >= 2.53), none by default."""
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
        + (f" --llm-offset {llm_offset}" if llm_offset != TIER_LLM_OFFSET[JUDGE_TIER] else "")
        + (f" --query-offset {query_offset}" if query_offset else "")
        + " (do not edit: regenerate).",
        f"# Windows: {windows}. Baseline: the last {BASELINE_DAYS} days at the same time of day, pooled every"
        f" {BASELINE_INTERVAL} (for {BASELINE_LEAD_MIN}m ahead),",
        f"# shifted by the weekday {BASELINE_DAYS}d ago against the pool.",
        f"# Level SD {level_sd}, margin {margin}, z > {z} (the whole",
        f"# family: about {FALSE_ALARMS_PER_MONTH} false alarm per data source per month under no change), minimum"
        f" {min_count} scored",
        "# evaluations in the window and in the baseline. The script's docstring derives z; deploy/README.md",
        "# (Runbook: ContextPrecisionMAPRegression) and docs/how-to/alerts-and-runbooks.md explain what to tune.",
        *([f"# The cascade's cheap-only terms are read {llm_offset}m earlier than its LLM-judged ones (--llm-offset:"
           " the LLM's",
           "# scores reach the counters that much later)."] if llm_offset else []),
        "",
        "groups:",
        *_group("recording", INTERVAL, query_offset),
        "      # Per data source and window (the rule's label window): count, sum and sum of squares of AP over the window.",
    ]
    scan = _scan(p, metrics, margin, z, min_count, level_sd, llm_offset)
    pools = [
        "",
        *_group("baseline", BASELINE_INTERVAL, query_offset),
        f"      # Every window at the same time of day on each of the last {BASELINE_DAYS} days, pooled (the window"
        " records'",
        f"      # offsets: every window in one rule), and what depends on the pool alone. Every {BASELINE_INTERVAL}, not"
        " every minute:",
        "      # the pool moves by a few minutes of seven days, and its reads cost more than the rest of the scan."
        " Each",
        f"      # evaluation pools the time of day {BASELINE_LEAD_MIN}m ahead of it (offsets {BASELINE_LEAD_MIN}m short"
        " of whole days), the middle of",
        f"      # the minutes that read it; they read it through last_over_time over {BASELINE_HOLD}.",
    ]
    for part in metrics:
        pools += [f"      - record: {p}_{part}:baseline", f"        expr: {_baseline(f'{p}_{part}:window')}"]
    pools += _plain_baseline_records(min_count, level_sd)
    pools += _ppi_baseline_records(llm_offset)
    held = {line.split("record: ", 1)[1] for line in pools if "- record: " in line}
    lines += _held(scan, held) + pools
    top = f'topk(1, {p}:drop_z{{{DS}=\\"%s\\"}})'  # inside a template's string: quotes escaped
    pick = f'{{{{ with query (printf "{top}" $labels.{DS}) }}}}{{{{ with first . }}}}'
    lines += _held([
        "",
        *_group("alerts", INTERVAL, query_offset),
        f"      # The family's statistic per data source, over its windows (the dashboard plots it against"
        f" {z}).",
        f"      - record: {DS}:context_precision_score:drop_z_max",
        f"        expr: max by ({DS}) ({p}:drop_z)",
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
        f" on the last {BASELINE_DAYS} days, shifted for the weekday)",
        f"            at z = {{{{ .Value | printf \"%.1f\" }}}} > {z} ({_spread(level_sd, margin)}).{{{{ end }}}}"
        "{{ end }}",
        "            " + _figure("drop", "Estimated drop {{ .Value | printf \"%.3f\" }}"),
        "            " + _figure("drop_stderr", "± {{ .Value | printf \"%.3f\" }} (95%)", f"{INTERVAL_Z} * "),
        "            " + _figure("baseline_mean", "from a baseline MAP of {{ .Value | printf \"%.3f\" }}") + ",",
        "            " + _figure("evaluations", "on {{ .Value | printf \"%.0f\" }} scored evaluations"),
        "            " + _figure("baseline_evaluations", "against {{ .Value | printf \"%.0f\" }} in the baseline."),
        "            Look for an index, embedding, ranking or judge change deployed before the window began (the"
        " dashboard marks judge changes);",
        "            the worst evaluations of the window are the exemplars on the dashboard's MAP panels, or Jaeger"
        " tag gen_ai.evaluation.score.label=fail.",
        f"          dashboard: '/d/cp-observe-context-precision/context-precision?var-data_source="
        f"{{{{ $labels.{DS} }}}}'",
        "          runbook_url: 'deploy/README.md#runbook-contextprecisionmapregression'",
        "",
    ], held)
    return "\n".join(lines)



def _group(name: str, interval: str, query_offset: str | None) -> list[str]:
    """A rule group's first lines: its name, interval, any ``query_offset``, and the start of its rules."""
    return [f"  - name: context_precision.detection.{name}", f"    interval: {interval}",
            *([f"    query_offset: {query_offset}"] if query_offset else []), "    rules:"]


#: The groups ``--shard`` splits by data source: every group that computes per data source.
SHARDED = ("context_precision.detection.recording", "context_precision.detection.baseline")
#: A windowed record's name (its series carry a ``window`` label): the score's, the cascade's and its terms'.
_WINDOWED = re.compile(r"(?<![\w:])(" + re.escape(DS) + r"(?:_term)?_window:[\w:]+)(\{[^}]*\})?")


def only(lines: list[str], windows: tuple[int, ...], windowed: re.Pattern[str] = _WINDOWED) -> list[str]:
    """``lines`` (rules over every window) with each windowed record they read (``windowed``: its name, then any
    matchers) restricted to ``windows``: the rules of one group compute its windows alone and write series no other
    group writes."""
    matcher = f'window="{windows[0]}m"' if len(windows) == 1 else 'window=~"' + "|".join(f"{w}m" for w in windows) + '"'

    def rewrite(line: str) -> str:
        if "- record: " in line or line.lstrip().startswith("#"):
            return line
        return windowed.sub(lambda m: f"{m[1]}{{{m[2][1:-1] + ',' if m[2] else ''}{matcher}}}", line)
    return [rewrite(line) for line in lines]


def _scan(p: str, metrics: dict[str, str], margin: float, z: float, min_count: int, level_sd: float,
          llm_offset: int) -> list[str]:
    """The minute group's rules: the window records, then their statistics (the score series', the cascade's
    PPI++, the figures the alert reads)."""
    return [*window_records(p, metrics, DS), *_cascade_window_records(), *_cascade_terms(llm_offset),
            *_plain_records(margin, min_count, level_sd), *_ppi_records(margin, min_count, level_sd),
            *_chosen_records(z, min_count)]


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
    """The score series' drop per window: its mean, the drop against the shifted baseline (the baseline group's),
    its standard error, z."""
    p, q, w = PREFIX, f"{PREFIX}_plain", WEEKLY
    on = f"on ({DS}, window)"
    return [
        "      # The score series: the drop (the baseline group's shifted mean - the window's mean), its",
        "      # standard error from the pool's variance and the weekly shift's, z.",
        f"      - record: {q}:drop",
        f"        expr: {q}:baseline_mean - {on} ({p}_sum:window / {on} {p}_count:window)",
        f"      - record: {q}:drop_stderr",
        "        expr: |",
        "          sqrt(",
        f"            clamp_min({p}_squares:baseline / {on} {p}_count:baseline - {on} {q}:pool_mean ^ 2, {VAR_FLOOR})",
        f"            * on ({DS}, window) (1 / {p}_count:window + {on} 1 / {p}_count:baseline)",
        f"            + on ({DS}) group_left() {w}:weekly_shift_var",
        f"            + {level_sd ** 2!r}",
        "          )",
        f"      - record: {q}:drop_z",
        "        expr: |",
        f"          ({q}:drop - {margin}) / {on} {q}:drop_stderr",
        f"          and {on} {p}_count:window >= {min_count}",
        f"          and {on} {p}_count:baseline >= {min_count}",
    ]


def _plain_baseline_records(min_count: int, level_sd: float) -> list[str]:
    """The score series' baseline (the baseline group: it reads the pools and the window records ``offset 7d`` alone):
    the pool's mean, the weekly shift and its variance, and the shifted mean the drop compares with."""
    p, q, w = PREFIX, f"{PREFIX}_plain", WEEKLY
    on = f"on ({DS}, window)"
    longest = f'window="{WINDOWS[-1]}m"'
    week = f"offset {day_offset(BASELINE_DAYS)}"
    tau2 = level_sd**2
    return [
        "      # The score series: the pool's mean, then today's weekly shift from the longest window: how the same",
        f"      # weekday {BASELINE_DAYS} days ago stood against the pool (its gap), shrunk toward 0 by its noise with the"
        " level SD as",
        "      # the prior (weight = sd^2 / (sd^2 + var(gap))); 0 where that day has too few evaluations. Only the",
        "      # window records carry a window matcher: matching on (data source, window) picks the pool's longest.",
        f"      - record: {q}:pool_mean",
        f"        expr: {p}_sum:baseline / {on} {p}_count:baseline",
        f"      - record: {w}:weekly_gap",
        "        expr: |",
        f"          sum by ({DS}) (",
        f"            {p}_sum:window{{{longest}}} {week} / {on} {p}_count:window{{{longest}}} {week}",
        f"            - {on} {q}:pool_mean",
        f"            and {on} {p}_count:window{{{longest}}} {week} >= {min_count}",
        "          )",
        f"      - record: {w}:weekly_gap_var",
        "        expr: |",
        f"          sum by ({DS}) (",
        f"            clamp_min({p}_squares:baseline / {on} {p}_count:baseline - {on} {q}:pool_mean ^ 2, {VAR_FLOOR})",
        f"            * {on} (1 / {p}_count:window{{{longest}}} {week} - {on} 1 / {p}_count:baseline)",
        "          )",
        f"          and on ({DS}) {w}:weekly_gap",
        f"      - record: {w}:weekly_shift",
        "        expr: |",
        f"          {w}:weekly_gap * {tau2!r} / on ({DS}) ({tau2!r} + {w}:weekly_gap_var)",
        f"          or on ({DS}) 0 * max by ({DS}) ({p}_count:baseline)",
        f"      - record: {w}:weekly_shift_var",
        "        expr: |",
        f"          {w}:weekly_gap_var * {tau2 * tau2!r} / on ({DS}) ({tau2!r} + {w}:weekly_gap_var) ^ 2",
        f"          or on ({DS}) 0 * max by ({DS}) ({p}_count:baseline)",
        "      # The baseline's mean: the pool's, moved by the weekly shift.",
        f"      - record: {q}:baseline_mean",
        f"        expr: {q}:pool_mean + on ({DS}) group_left() {w}:weekly_shift",
    ]


def _term_expr(term: str, side: str, llm_offset: int) -> list[str]:
    """One term's series of the cascade's ``side`` (window or baseline) record; with ``llm_offset``, a term over all
    evaluations is its LLM-judged part now plus its cheap-only part (the difference) ``llm_offset`` earlier: the
    window record ``offset`` that much, the pool of the window records that much before each day's (the
    ``:baseline_early`` record: the baseline group is written every BASELINE_INTERVAL, so an ``offset`` on its own
    record would read an older pool). The LLM-judged part counts 0 where its series does not exist (the LLM has
    judged nothing of this data source since its processes started), as it does unshifted."""
    one = f'sum without (term) ({CASCADE_TERMS}:{side}{{term="%s"}}%s)'
    sub = dict(CHEAP_ONLY).get(term)
    if not llm_offset or sub is None:
        return [f"        expr: {one % (term, '')}"]
    on = f"on ({DS}, window)"

    def judged(read: str) -> str:
        return f"({read % sub} or 0 * {read % term})"

    current = one % ("%s", "")
    earlier = one % ("%s", f" offset {llm_offset}m") if side == "window" else \
        f'sum without (term) ({CASCADE_TERMS}:baseline_early{{term="%s"}})'
    return ["        expr: |", f"          {judged(current)}",
            f"          + {on} ({earlier % term} - {on} {judged(earlier)})"]


def _terms(side: str, llm_offset: int = 0) -> list[str]:
    """One series per PPI term of the cascade's ``side`` (window or baseline) record (``_term_expr``): every term of
    the baseline, the window's that its PPI++ mean and count read (WINDOW_TERMS)."""
    return [line for term in (PPI_TERMS if side == "baseline" else WINDOW_TERMS)
            for line in (f"      - record: {CASCADE}_{term}:{side}", *_term_expr(term, side, llm_offset))]


def _cascade_window_records(windows: tuple[int, ...] = WINDOWS) -> list[str]:
    """The cascade's PPI sums over each of ``windows`` (doubling records, all terms in one)."""
    return [
        "      # Where the cheap-plus-LLM cascade runs: its PPI sums (context_precision_cascade_sums_total{term}) over",
        "      # each window (doubling records, all terms in one).",
        *(line.replace(f"{CASCADE_TERMS}_:", f"{CASCADE_TERMS}:")
          for line in window_records(CASCADE_TERMS, {"": CASCADE_METRIC}, f"{DS}, term", windows)),
    ]


def _cascade_terms(llm_offset: int = 0) -> list[str]:
    """The cascade's window records as one series per term (``_term_expr``)."""
    return ["      # The cascade's window records, one series per term.", *_terms("window", llm_offset)]


def _ppi_baseline_records(llm_offset: int = 0) -> list[str]:
    """The cascade's pooled baseline, one series per term, its moments and PPI++ weight (the baseline group); with
    ``llm_offset``, also the pool of the cheap-only terms' parts that much earlier (``_term_expr``)."""
    c, q = CASCADE, f"{PREFIX}_ppi"
    on = f"on ({DS}, window)"

    def t(term: str) -> str:
        return f"{c}_{term}:baseline"

    b_unl = f"{c}_unlabelled:baseline"
    early = f'{CASCADE_TERMS}:window{{term=~"{"|".join(part for pair in CHEAP_ONLY for part in pair)}"}}'
    return [
        "      # The cascade's PPI sums over the same baseline, then one series per term.",
        f"      - record: {CASCADE_TERMS}:baseline",
        f"        expr: {_baseline(f'{CASCADE_TERMS}:window', f'{DS}, term')}",
        *([f"      # ... and {llm_offset}m before each day's (--llm-offset), the terms the cheap-only parts are read"
           " from.",
           f"      - record: {CASCADE_TERMS}:baseline_early",
           f"        expr: {_baseline(early, f'{DS}, term', llm_offset)}"] if llm_offset else []),
        *_terms("baseline", llm_offset),
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
    unl = f"({t('count', 'window')} - {on} {t('n', 'window')})"  # the window's unlabelled evaluations
    f_sub_mean = f"({t('f_sub', 'window')} / {on} {t('n', 'window')})"
    return [
        "      # The window's mean with the baseline's weight; its unlabelled mean is its f_sub's where it has none.",
        f"      - record: {q}:mean",
        "        expr: |",
        f"          {t('y', 'window')} / {on} {t('n', 'window')}",
        f"          + {on} {q}:lambda * {on} (",
        "            (",
        f"              ({t('f', 'window')} - {on} {t('f_sub', 'window')}) / {on} {unl}"
        f" and {on} {unl} > 0.5",
        f"              or {on} {f_sub_mean}",
        "            )",
        f"            - {on} {f_sub_mean}",
        "          )",
        f"      - record: {q}:drop",
        f"        expr: {q}:baseline_mean - {on} {q}:mean",
        f"      - record: {q}:drop_stderr",
        "        expr: |",
        "          sqrt(",
        f"            {q}:residual_var * {on} (1 / {t('n', 'window')} + {on} 1 / {t('n', 'baseline')})",
        f"            + {on} {q}:lambda ^ 2 * {on} {c}_f_unlabelled:baseline_var",
        f"              * {on} (1 / clamp_min{unl[:-1]}, 1) + {on} 1 / clamp_min({b_unl}, 1))",
        f"            + {level_sd ** 2!r}",
        "          )",
        f"      - record: {q}:drop_z",
        "        expr: |",
        f"          ({q}:drop - {margin}) / {on} {q}:drop_stderr",
        f"          and {on} {t('n', 'window')} >= {min_count}",
        f"          and {on} {t('n', 'baseline')} >= {min_count}",
    ]


def _chosen_records(z: float, min_count: int) -> list[str]:
    """Per data source and window, the PPI++ z where it judges, else the score series' where the window holds no
    cascade evaluation (so a cascade turned off leaves the short windows to the score series at once). The alert's
    figures follow the same choice at notification time (``_figure``)."""
    p, c = PREFIX, CASCADE
    return [
        "      # What the alert reads, per data source and window: the PPI++ z where it judges (at least"
        f" {min_count}",
        "      # LLM-judged evaluations in the window and in the baseline), else the score series' where the window"
        " holds",
        "      # no cascade evaluation; neither in a window whose cascade has too few (the first day after it is"
        " turned on).",
        f"      - record: {p}:drop_z",
        f"        expr: {p}_ppi:drop_z or ({p}_plain:drop_z unless on ({DS}, window) {c}_count:window > 0)",
    ]


#: The alert's counts (``_figure``): per name, the PPI++ record and the score series'. Every other figure is the
#: record of its name after ``_ppi`` or ``_plain``.
_FIGURES = {"evaluations": (f"{CASCADE}_n:window", f"{PREFIX}_count:window"),
            "baseline_evaluations": (f"{CASCADE}_n:baseline", f"{PREFIX}_count:baseline")}


def _figure(name: str, text: str, scale: str = "") -> str:
    """A sentence of the alert's description: ``text`` with the figure ``name`` of the window whose z is the data
    source's largest, from the branch that z came from (the PPI++ figure where its z exists, else the score
    series'), queried when the alert is sent rather than recorded every minute."""
    ppi, plain = _FIGURES.get(name, (f"{PREFIX}_ppi:{name}", f"{PREFIX}_plain:{name}"))
    one = f'{DS}=\\"%s\\"'  # inside a template's string: quotes escaped
    on = f"on ({DS}, window)"
    query = (f"{scale}(({ppi}{{{one}}} and {on} {PREFIX}_ppi:drop_z) or {on} {plain}{{{one}}})"
             f" and {on} topk(1, {PREFIX}:drop_z{{{one}}})")
    return (f'{{{{ with query (printf "{query}" $labels.{DS} $labels.{DS} $labels.{DS}) }}}}'
            f"{{{{ with first . }}}}{text}{{{{ end }}}}{{{{ end }}}}")


# --- promtool scenarios: deploy/prometheus/tests/context_precision_detection.test.yml ------------------------------

SCENARIO_DAYS = 9  # the checks fall on day 8, when every baseline window lies within the data
CASCADE_DAYS = 3  # the cascade's scenarios: checked on day 2, against a pool of the two days before
STEP_MIN = 5  # the scenarios' scrape interval
EVAL_MIN = 5  # their evaluation interval: the scrape's, so each window record finds its earlier half
LABELS = ('{job="rag-app",instance="pod-1",otel_scope_name="cp_observe",gen_ai_evaluation_name="context_precision",'
          'gen_ai_data_source_id="kb",stage="retrieval"}')


def daily_mean(minute: int) -> float:
    """The scenarios' healthy MAP: 0.625, 0.0625 higher by day and lower by night (binary fractions: exact sums)."""
    return 0.625 + 0.0625 * round(math.sin(2 * math.pi * (minute // 60) / 24))


def weekly_mean(minute: int) -> float:
    """The daily pattern, 1/16 higher on every seventh day (days 1 and 8 of the scenarios): a weekly rhythm."""
    return daily_mean(minute) + (0.0625 if minute // DAY_MIN % 7 == 1 else 0.0)


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


def _cascade_counters(mean_y_at, mean_f_at, off_from: int | None = None, days: int = CASCADE_DAYS, *,
                      judged: int = CASCADE_JUDGED, late: int = 0) -> tuple[dict[str, list[float]], list[list[float]]]:
    """Cumulative PPI sums by term, and the score series the library records beside them (the LLM's AP where it
    judged, the cheap judge's elsewhere), at every STEP_MIN. Scores are 0 or 1; the two judges disagree on 1/16
    of the LLM-judged evaluations more than their means require. From ``off_from`` the cascade is off: its sums
    stay where they were and the LLM judges every evaluation. ``judged`` evaluations a minute are judged by both
    judges, as many by the cheap one alone; the LLM-judged ones reach the counters ``late`` minutes (a multiple of
    STEP_MIN) after the cheap-only ones of the same minute, every term of them at once, as the library emits them."""
    k = judged * STEP_MIN
    terms = {t: [0.0] for t in PPI_TERMS}
    plain: list[list[float]] = [[0.0], [0.0], [0.0]]
    for minute in range(0, days * DAY_MIN, STEP_MIN):
        f = mean_f_at(minute)  # the cheap-only evaluations of this minute
        asked = minute - late  # the LLM-judged evaluations answered in this minute
        y_j, f_j, k_j = (mean_y_at(asked), mean_f_at(asked), k) if asked >= 0 else (0.0, 0.0, 0)
        on = off_from is None or minute < off_from
        step = {"count": k + k_j, "f": k * f + k_j * f_j, "f2": k * f + k_j * f_j, "n": k_j, "y": k_j * y_j,
                "y2": k_j * y_j, "f_sub": k_j * f_j, "f2_sub": k_j * f_j, "fy": k_j * (min(y_j, f_j) - 0.0625)}
        for t, series in terms.items():
            series.append(series[-1] + (step[t] if on else 0.0))
        scored = k_j * y_j + k * f if on else 2 * k * mean_y_at(minute)
        for series, add in zip(plain, (k + k_j if on else 2 * k, scored, scored)):
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


def weekly_shift(counters: list[list[float]], at: int) -> tuple[float, float]:
    """(shift, its variance) at step ``at``: the longest window's mean BASELINE_DAYS days ago minus the pool's, times
    sd^2 / (sd^2 + var(gap)) with sd = LEVEL_SD; (0, 0) where that day has fewer than MIN_COUNT evaluations."""
    back = WINDOWS[-1] // STEP_MIN
    day = DAY_MIN // STEP_MIN
    (_, big_n), (_, big_s), (_, big_q) = (_window_sums(c, at, back) for c in counters)
    then = at - BASELINE_DAYS * day
    if then < 0 or big_n is None or big_s is None or big_q is None:
        return 0.0, 0.0
    n7, s7 = (recorded_window(c, WINDOWS[-1])[then] for c in counters[:2])
    if n7 is None or s7 is None or n7 < MIN_COUNT:
        return 0.0, 0.0
    pool = big_s / big_n
    gap = s7 / n7 - pool
    gap_var = max(big_q / big_n - pool**2, VAR_FLOOR) * (1 / n7 - 1 / big_n)
    tau2 = LEVEL_SD**2
    return gap * tau2 / (tau2 + gap_var), gap_var * (tau2 * tau2) / (tau2 + gap_var) ** 2


def _plain_z(counters: list[list[float]], at: int, back: int, weekly: bool = True
             ) -> tuple[float, float, float, float, float, float] | None:
    """(z, drop, SE, baseline mean, n, N) of the score series over one window (``weekly``: with the weekly shift,
    as the rules; without it, the pool alone, as the rules before it)."""
    (n, big_n), (s, big_s), (_, big_q) = (_window_sums(c, at, back) for c in counters)
    if n is None or big_n is None or s is None or big_s is None or big_q is None:
        return None
    if n < MIN_COUNT or big_n < MIN_COUNT:
        return None
    shift, shift_var = weekly_shift(counters, at) if weekly else (0.0, 0.0)
    pool = big_s / big_n
    base = pool + shift
    drop = base - s / n
    se = math.sqrt(max(big_q / big_n - pool**2, VAR_FLOOR) * (1 / n + 1 / big_n) + shift_var + LEVEL_SD**2)
    return (drop - MARGIN) / se, drop, se, base, n, big_n


def _ppi_z(terms: dict[str, list[float]], at: int, back: int, llm_offset: int = 0
           ) -> tuple[float, float, float, float, float, float] | None:
    """(z, drop, SE, baseline mean, n, n_b) of the cascade's PPI++ MAP over one window (as _judging/_ppi.py); with
    ``llm_offset`` (minutes), the cheap-only terms read that much earlier, as the rules' --llm-offset."""
    w, b = ({t: _window_sums(series, at, back)[k] for t, series in terms.items()} for k in (0, 1))
    if llm_offset:
        earlier = at - llm_offset // STEP_MIN
        for now, k in ((w, 0), (b, 1)):
            for total, sub in CHEAP_ONLY:
                then_total, then_sub = (_window_sums(terms[x], earlier, back)[k] for x in (total, sub))
                parts = (now[sub], then_total, then_sub)
                now[total] = None if None in parts else parts[0] + parts[1] - parts[2]  # type: ignore[operator]
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


def evaluate(counters: list[list[float]], minute: int, terms: dict[str, list[float]] | None = None,
             llm_offset: int = 0, weekly: bool = True) -> tuple[float, int, float, float, float, float, float] | None:
    """The rules at ``minute`` (a multiple of STEP_MIN): (z, window, drop, SE, baseline mean, n, N) of the
    largest z, or None. ``increase`` over a window whose edges are samples is their difference. With the
    cascade's PPI sums (``terms``), a window is judged on the PPI++ figures where they judge (n and N are then the
    LLM-judged counts), on the score series' where the window holds no cascade evaluation, else not at all;
    ``llm_offset`` as the rules' --llm-offset (a multiple of STEP_MIN); ``weekly`` False: the score series against
    the pool alone, as the rules before the weekly shift."""
    at = minute // STEP_MIN
    best = None
    for w in WINDOWS:
        back = w // STEP_MIN
        found = _ppi_z(terms, at, back, llm_offset) if terms else None
        count = _cascade_count(terms, at, back, llm_offset) if terms else None
        if found is None and not (count or 0) > 0:
            found = _plain_z(counters, at, back, weekly)
        if found is not None and (best is None or found[0] > best[0]):
            best = (found[0], w, *found[1:])
    return best


def _cascade_count(terms: dict[str, list[float]], at: int, back: int, llm_offset: int) -> float | None:
    """The rules' cascade count of one window (what decides whether the score series may judge it)."""
    now = _window_sums(terms["n"], at, back)[0]
    if not llm_offset:
        return _window_sums(terms["count"], at, back)[0]
    earlier = at - llm_offset // STEP_MIN
    parts = (now, _window_sums(terms["count"], earlier, back)[0], _window_sums(terms["n"], earlier, back)[0])
    return None if None in parts else parts[0] + parts[1] - parts[2]  # type: ignore[operator]


def _annotations(source: str, found: tuple) -> tuple[str, str]:
    z, w, drop, se, base, n, big_n = found
    summary = f"Context precision of {source} dropped below its baseline (scan statistic {z:.1f} > {Z})"
    description = (
        f"Over the last {w}m, the sampled MAP of retriever {source} is below its baseline (the same {w}m at this"
        f" time of day on the last {BASELINE_DAYS} days, shifted for the weekday) at z = {z:.1f} > {Z} ({_spread(LEVEL_SD, MARGIN)})."
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
                times: list[int], llm_offset: int = 0) -> list[str]:
    """One promtool test group: its input series and the alert's expected state at ``times`` (from ``evaluate``,
    with ``llm_offset`` as the rules under test)."""
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
                 if (found := evaluate(counters[name], minute, terms.get(name), llm_offset)) is not None
                 and found[0] > Z]
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
        # A weekly rhythm: every seventh day (days 1 and 8) sits 1/16 above the others, so the 7-day pool lies
        # below day 8 by 3/56 and a drop of 1/8 there looks like one of 1/14 against the pool alone.
        "weekly": (4, lambda m: weekly_mean(m) - (0.125 if m >= change else 0)),
    }
    assert SCENARIO_DAYS == 9  # weekly_mean's days 1 and 8: the last day is the weekday of the pool's oldest
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
    firsts = {name: next(m for m in last_day if m >= change and firing(name, m))
              for name in ("step", "drift", "weekly")}
    c_firsts = {name: next(m for m in c_last_day if m >= c_change and firing(name, m))
                for name in ("cascade_blind", "cascade_off")}
    # On the day above the weekly average the shift is what fires it: the pool alone fires hours later.
    pool_only = next(m for m in last_day if m >= change and (f := evaluate(counters["weekly"], m, weekly=False))
                     and f[0] > Z)
    assert pool_only - firsts["weekly"] >= 120, (pool_only, firsts["weekly"])
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
        "# evaluations an hour (under the minimum in every window: quiet); weekly sits 1/16 higher on days 1 and 8",
        "# (a weekly rhythm) and drops 1/8: the weekly shift (day 1 against the pool) fires it about 5 h after the",
        "# change, where the pool alone would take 10 h.",
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
    lines += _test_group("steady daily pattern quiet, step, drift and a drop on a day above the weekly average fire,"
                         " too few evaluations quiet", counters, {}, times(change, firsts))
    lines += _test_group("the cascade's PPI++ (steady quiet, a drop only the LLM sees fires, a cascade turned off)",
                         c_counters, terms, times(c_change, c_firsts))
    return "\n".join(lines) + "\n"


LATE_MIN = 15  # the late scenarios' LLM latency: three evaluations (the scenarios evaluate every STEP_MIN)
LATE_JUDGED = 32  # their evaluations a minute judged by both judges (as many by the cheap one alone)


def late_scenarios(llm_offset: int, rule_file: str) -> str:
    """A promtool test file for ``rule_file`` (this script's rules with ``llm_offset``) on cascade streams whose
    LLM-judged evaluations reach the counters LATE_MIN after the cheap-only ones.

    Both are quiet before the change; cascade_late_blind (the LLM's MAP drops 0.25, the cheap judge's does not)
    fires LATE_MIN or more after it; cascade_late_cheap_moves (the cheap judge's scores drop 0.5, the LLM's MAP
    stays: a cheap judge changed or broken) is the misalignment's case: read at once, the window's cheap-only
    scores have moved while its LLM-judged ones are still those of before, and the PPI++ MAP drops by lambda times
    the move until the LLM's scores of the same minutes arrive. With ``llm_offset`` = LATE_MIN both parts describe
    the same minutes and it stays quiet; without, it fires for those minutes. The expected alerts are evaluate's,
    so either way promtool checks the rules compute what the generator says.
    """
    assert llm_offset % STEP_MIN == 0 and LATE_MIN % STEP_MIN == 0
    change = (CASCADE_DAYS - 1) * DAY_MIN + 12 * 60  # as the cascade's scenarios: CASCADE_DAYS, the last at 12:00

    def after(minute: int) -> bool:
        return minute >= change
    cascades = {
        "cascade_late_blind": _cascade_counters(lambda m: daily_mean(m) - (0.25 if after(m) else 0), daily_mean,
                                                judged=LATE_JUDGED, late=LATE_MIN),
        "cascade_late_cheap_moves": _cascade_counters(daily_mean, lambda m: daily_mean(m) - (0.5 if after(m) else 0),
                                                      judged=LATE_JUDGED, late=LATE_MIN),
    }
    counters = {name: plain for name, (_, plain) in cascades.items()}
    terms = {name: by_term for name, (by_term, _) in cascades.items()}
    window = range(change - 6 * EVAL_MIN, change + 2 * 60 + EVAL_MIN, EVAL_MIN)

    def firing(name: str, minute: int) -> tuple | None:
        found = evaluate(counters[name], minute, terms[name], llm_offset)
        return found if found is not None and found[0] > Z else None

    assert not any(firing(name, m) for name in terms for m in window if m < change)
    blind = next(m for m in window if firing("cascade_late_blind", m))
    moves = [m for m in window if firing("cascade_late_cheap_moves", m)]
    assert blind >= change + LATE_MIN  # nothing of the LLM's drop is in the counters before then
    assert bool(moves) == (llm_offset != LATE_MIN), (llm_offset, moves)
    times = sorted({change - EVAL_MIN, change + 2 * 60, blind - EVAL_MIN, blind,
                    *(m for m in moves[:1]), *(m - EVAL_MIN for m in moves[:1]), *(m + EVAL_MIN for m in moves[-1:])})
    lines = [
        f"# promtool unit tests for {rule_file} (detection_rules.py --llm-offset {llm_offset}) on cascade streams",
        f"# whose LLM-judged evaluations reach the counters {LATE_MIN} min after the cheap-only ones",
        "# (detection_rules.py: late_scenarios).",
        "",
        "rule_files:",
        f"  - {rule_file}",
        "",
        f"evaluation_interval: {EVAL_MIN}m",
        "",
        "group_eval_order:",
        "  - context_precision.detection.baseline",
        "  - context_precision.detection.recording",
        "  - context_precision.detection.alerts",
        "",
        "tests:",
    ]
    return "\n".join(lines + _test_group("late LLM scores in the cascade", counters, terms, times, llm_offset)) + "\n"


def _minutes(text: str) -> int:
    """--llm-offset's value: whole minutes, bare or with an ``m`` (the rules evaluate every minute)."""
    match = re.fullmatch(r"(\d+)m?", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"whole minutes, e.g. 3 or 3m: {text!r}")
    return int(match[1])


def main(argv: list[str] | None = None) -> int:
    """Print the rules."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--margin", type=float, default=MARGIN, help="the smallest drop that counts (MAP units)")
    parser.add_argument("--level-sd", type=float, default=LEVEL_SD,
                        help="how far a healthy day's MAP strays from the weekday-shifted 7-day same-time baseline (SD, MAP units)")
    parser.add_argument("--z", type=float, default=Z, help="the family's threshold (higher: fewer false alarms)")
    parser.add_argument("--min-count", type=int, default=MIN_COUNT, help="scored evaluations a window needs")
    parser.add_argument("--judge-tier", choices=sorted(TIER_LLM_OFFSET), default=JUDGE_TIER,
                        help="the LLM judge's service tier (the library's judge_service_tier: flex, else standard):"
                             " sets --llm-offset's default (TIER_LLM_OFFSET)")
    parser.add_argument("--llm-offset", type=_minutes, default=None, metavar="MINUTES",
                        help="read the cascade's cheap-only terms this much earlier than its LLM-judged ones, which"
                             " reach the counters that much later (whole minutes, '3' or '3m'; default: by"
                             " --judge-tier)")
    parser.add_argument("--query-offset", default=None, metavar="DURATION",
                        help="the groups' query_offset (Prometheus >= 2.53 only): every read of every group moved back"
                             " alike, for samples that reach the TSDB late")
    parser.add_argument("--tests", action="store_true", help="print the promtool scenarios for the defaults instead")
    parser.add_argument("--shard", action="append", default=[], metavar="REGEX",
                        help="a group for the data sources whose id matches REGEX (repeat; a last group takes the"
                             " rest)")
    args = parser.parse_args(argv)
    if args.query_offset is not None and not re.fullmatch(r"(\d+(ms|s|m|h|d|w|y))+", args.query_offset):
        parser.error(f"--query-offset: not a Prometheus duration: {args.query_offset!r}")
    llm_offset = TIER_LLM_OFFSET[args.judge_tier] if args.llm_offset is None else args.llm_offset
    text = scenarios() if args.tests else rules(args.margin, args.z, args.min_count, args.level_sd, llm_offset,
                                                args.query_offset)
    if args.shard and not args.tests:
        for group in SHARDED:
            text = shard(text, args.shard, group)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
