"""``cp-observe deploy backfill``: the alert rules' window records written for past days, as TSDB blocks.

The drop detection and the canary rules record the shortest window from the raw counters and every longer one
as two recorded halves (``X{window="5m"} + X{window="5m"} offset 5m``), and the drop detection's baseline reads
those records on each of the last seven days. An installation whose rules are new (an upgrade that has the raw
counters but no records, or a Prometheus just started) would otherwise compare with the days it has recorded.

The records depend on each other window by window, so they are built in passes: the shortest window's rules are
evaluated by the Prometheus (or Mimir) that holds the raw history, as range queries at the rules' one-minute
evaluation times (what ``promtool tsdb create-blocks-from rules`` does); each longer window is then its two
halves added, at the same times, exactly as the rules add them; ``promtool tsdb create-blocks-from openmetrics``
writes the blocks. (``create-blocks-from rules`` cannot see the output of other rules in the same pass: nine
passes against a Prometheus that has loaded the previous pass's blocks, and a block per rule per two hours, about
6,000 for eight days, which the Prometheus then has to compact.) Only the window records are needed: the
baseline and the statistics are computed live from them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cp_observe._errors import CpObserveError

__all__ = ["Pass", "backfill", "plan", "records", "shipped_rule_files"]

#: Seven baseline days plus one: the longest window's records on the oldest baseline day need the day before.
DEFAULT_DAYS = 8
EVAL_INTERVAL_S = 60  # the shipped groups' interval: the records land on the minute grid the live rules read
_SHIPPED = ("deploy/prometheus/rules/context_precision_detection.rules.yml",
            "deploy/prometheus/rules/context_precision_canary.rules.yml")
_HALF = re.compile(r'([\w:]+)\{window="(\d+m)"\}')


@dataclass(frozen=True, slots=True)
class Pass:
    """One promtool pass: its window length and the rule file's text; ``raw`` when it reads the raw counters."""

    window: str
    text: str
    raw: bool


def shipped_rule_files() -> list[str]:
    """The shipped drop-detection and canary rule files' text."""
    from cp_observe.deploy._assets import asset_files

    files = asset_files()
    return [files[path].decode() for path in _SHIPPED]


def plan(texts: list[str]) -> list[Pass]:
    """The window records of ``texts`` (rule files), one pass per window length in the order they depend.

    A window record is a recording rule with a ``window`` label whose record name ends in ``:window`` and whose
    expression is the raw counters' increase or two recorded halves; one that reads no other window record (the raw counters' increase) goes in the first pass, one that reads the records
    of window H goes after H's pass.

    Raises:
        CpObserveError: a text is not a rule file, has no window record, or its window records read each other in
            a cycle or a window no rule records.
    """
    import yaml

    by_window: dict[str, list[dict[str, object]]] = {}
    reads: dict[str, set[str]] = {}
    for text in texts:
        try:
            groups = yaml.safe_load(text)["groups"]
            rules = [r for g in groups for r in g["rules"]]
        except (yaml.YAMLError, KeyError, TypeError) as exc:
            raise CpObserveError(f"not a Prometheus rule file: {exc}") from exc
        for rule in rules:
            window = (rule.get("labels") or {}).get("window")
            if "record" not in rule or window is None or not str(rule["record"]).endswith(":window"):
                continue
            if "increase(" not in str(rule["expr"]) and not _DOUBLING.match(str(rule["expr"])):
                continue  # a statistic of one window (labelled with it), not a window record
            by_window.setdefault(window, []).append(rule)
            reads.setdefault(window, set()).update(w for _, w in _HALF.findall(str(rule["expr"])))
    if not by_window:
        raise CpObserveError("the rule files hold no window record (a recording rule with a window label)")
    order: list[str] = []
    while len(order) < len(by_window):
        ready = [w for w in by_window if w not in order and reads[w] <= set(order)]
        if not ready:
            left = sorted(set(by_window) - set(order))
            raise CpObserveError(f"the window records of {', '.join(left)} read a window no earlier pass records")
        order += sorted(ready, key=lambda w: int(w[:-1]))
    return [Pass(w, yaml.safe_dump({"groups": [{"name": f"cp_observe.backfill.window_{w}",
                                                "interval": f"{EVAL_INTERVAL_S}s", "rules": by_window[w]}]},
                                   sort_keys=False), raw=not reads[w])
            for w in order]


_DOUBLING = re.compile(r'^\s*([\w:]+)\{window="(\d+)m"\}\s*\+\s*\1\{window="\2m"\}\s+offset\s+\2m\s*$')
_MAX_POINTS = 10_000  # Prometheus refuses range queries of more than 11,000 points per series


def _query_range(url: str, expr: str, start: int, end: int) -> list[tuple[dict[str, str], dict[int, float]]]:
    """``expr`` at every EVAL_INTERVAL_S from ``start`` to ``end``: per series, its labels and values by time."""
    out: dict[tuple[tuple[str, str], ...], dict[int, float]] = {}
    first = start
    while first <= end:
        last = min(end, first + (_MAX_POINTS - 1) * EVAL_INTERVAL_S)
        body = urllib.parse.urlencode({"query": expr, "start": first, "end": last, "step": EVAL_INTERVAL_S})
        request = urllib.request.Request(f"{url}/api/v1/query_range", data=body.encode(),
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                answer = json.load(response)
        except (OSError, ValueError) as exc:
            raise CpObserveError(f"the range query to {url} failed: {exc}") from exc
        if answer.get("status") != "success":
            raise CpObserveError(f"{url} refused the range query: {answer.get('error', answer)}")
        for series in answer["data"]["result"]:
            key = tuple(sorted(series["metric"].items()))
            out.setdefault(key, {}).update({int(float(t)): float(v) for t, v in series["values"]})
        first = last + EVAL_INTERVAL_S
    return [(dict(key), values) for key, values in out.items()]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def records(url: str, texts: list[str], *, start: int, end: int
            ) -> Iterator[tuple[str, dict[str, str], dict[int, float]]]:
    """Every window record of ``texts`` at every minute in [start, end]: (record name, labels, values by time).

    Raises:
        CpObserveError: the rules cannot be ordered, a longer window is not two recorded halves, or a query fails.
    """
    import yaml

    passes = plan(texts)
    longer: dict[str, list[tuple[str, str]]] = {}  # record name -> (half, window) in pass order
    for step in passes[1:]:
        for rule in yaml.safe_load(step.text)["groups"][0]["rules"]:
            match = _DOUBLING.match(str(rule["expr"]))
            if match is None or match[1] != rule["record"]:
                raise CpObserveError(f"{rule['record']} {{window={step.window}}} is not two recorded halves"
                                     f" (X{{window=\"H\"}} + X{{window=\"H\"}} offset H): {rule['expr']}")
            longer.setdefault(str(rule["record"]), []).append((f"{match[2]}m", step.window))
    start -= start % EVAL_INTERVAL_S
    for rule in yaml.safe_load(passes[0].text)["groups"][0]["rules"]:
        name, rule_labels = str(rule["record"]), dict(rule.get("labels") or {})
        for found, values in _query_range(url, str(rule["expr"]), start, end):
            labels = {**{k: v for k, v in found.items() if k != "__name__"}, **rule_labels}
            by_window = {passes[0].window: values}
            yield name, labels, values
            for half, window in longer.get(name, []):
                lower, back = by_window[half], int(half[:-1]) * 60
                by_window[window] = {t: v + lower[t - back] for t, v in lower.items() if t - back in lower}
                yield name, {**labels, "window": window}, by_window[window]


def backfill(url: str, output_dir: Path, texts: list[str], *, start: int, end: int,
             promtool: str = "promtool") -> list[Path]:
    """Write the window records of ``texts`` for [start, end] as blocks in ``output_dir``; the blocks written.

    Raises:
        CpObserveError: promtool is missing or fails, the rules cannot be ordered, or a query fails.
    """
    if end <= start:
        raise CpObserveError(f"the backfill's end ({end}) must come after its start ({start})")
    tool = shutil.which(promtool)
    if tool is None:
        raise CpObserveError(f"{promtool} not found: the backfill needs Prometheus's promtool (2.27 or later)")
    output_dir.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in output_dir.iterdir()}
    with tempfile.TemporaryDirectory(prefix="cp-backfill-") as tmp:
        om = Path(tmp) / "records.om"
        with om.open("w", encoding="utf-8") as handle:
            family = None
            for name, labels, values in records(url, texts, start=start, end=end):
                if name != family:
                    handle.write(f"# TYPE {name} gauge\n")
                    family = name
                text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
                handle.writelines(f"{name}{{{text}}} {values[t]!r} {t}\n" for t in sorted(values))
            handle.write("# EOF\n")
        proc = subprocess.run([tool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(output_dir)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise CpObserveError(f"promtool failed: {(proc.stderr or proc.stdout).strip()[-2000:]}")
    return sorted(p for p in output_dir.iterdir() if p.is_dir() and p.name not in before)
