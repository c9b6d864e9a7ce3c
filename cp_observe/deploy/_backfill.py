"""``cp-observe deploy backfill``: the alert rules' window records written for past days, as TSDB blocks.

The drop detection and the canary rules record the shortest window from the raw counters and every longer one
as two recorded halves (``X{window="5m"} + X{window="5m"} offset 5m``), and the drop detection's baseline reads
those records on each of the last seven days. An installation whose rules are new (an upgrade that has the raw
counters but no records, or a Prometheus just started) would otherwise compare with the days it has recorded.

``promtool tsdb create-blocks-from rules`` evaluates recording rules over past time against a Prometheus, but
cannot see the output of other rules in the same pass, so the window records go in passes, one per window
length: the shortest window against the Prometheus (or Mimir) that holds the raw history, then each longer one
against a private Prometheus this command starts over the blocks written so far (restarted between passes, so it
reads the last pass's blocks). The blocks of every pass land in the output directory, for the installation's
Prometheus data directory or Mimir's block upload. Only the window records are needed: the baseline and the
statistics are computed live from them.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cp_observe._errors import CpObserveError

__all__ = ["Pass", "backfill", "plan", "shipped_rule_files"]

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

    A window record is a recording rule with a ``window`` label whose record name ends in ``:window``; one that
    reads no other window record (the raw counters' increase) goes in the first pass, one that reads the records
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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _private_prometheus(prometheus: str, storage: Path, log: Path) -> Iterator[str]:
    """A Prometheus on a loopback port over ``storage`` (the blocks written so far), no rules, no scrapes."""
    config = storage.parent / "backfill-prometheus.yml"
    config.write_text("global: {scrape_interval: 1m}\n", encoding="utf-8")
    port = _free_port()
    with log.open("a", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={storage}",
             "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise CpObserveError(f"the private Prometheus exited: {log.read_text(encoding='utf-8')[-2000:]}")
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise CpObserveError(f"the private Prometheus was not ready within 120 s ({log})") from None
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def backfill(url: str, output_dir: Path, texts: list[str], *, start: int, end: int, promtool: str = "promtool",
             prometheus: str = "prometheus") -> list[Path]:
    """Write the blocks of every pass into ``output_dir``; returns the block directories written, in order.

    Raises:
        CpObserveError: promtool or prometheus is missing, a pass fails, or the rules cannot be ordered.
    """
    if end <= start:
        raise CpObserveError(f"the backfill's end ({end}) must come after its start ({start})")
    passes = plan(texts)
    tools = {name: shutil.which(name) for name in (promtool, prometheus)}
    for name, found in tools.items():
        if found is None:
            raise CpObserveError(f"{name} not found: the backfill needs Prometheus's promtool and prometheus"
                                 " (2.27 or later)")
    output_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="cp-backfill-") as tmp:
        work = Path(tmp)
        storage = work / "storage"
        storage.mkdir()
        log = work / "prometheus.log"
        for number, step in enumerate(passes, start=1):
            rule_file, blocks = work / f"pass{number}.rules.yml", work / f"blocks{number}"
            rule_file.write_text(step.text, encoding="utf-8")
            context = contextlib.nullcontext(url) if step.raw else _private_prometheus(str(tools[prometheus]),
                                                                                       storage, log)
            with context as source:
                proc = subprocess.run(
                    [str(tools[promtool]), "tsdb", "create-blocks-from", "rules", "--quiet", f"--url={source}",
                     f"--start={start}", f"--end={end}", f"--output-dir={blocks}",
                     f"--eval-interval={EVAL_INTERVAL_S}s", str(rule_file)],
                    capture_output=True, text=True, check=False,
                )  # fmt: skip
            if proc.returncode != 0:
                raise CpObserveError(f"promtool failed on the {step.window} pass:"
                                     f" {(proc.stderr or proc.stdout).strip()[-2000:]}")
            for block in sorted(p for p in blocks.iterdir() if p.is_dir()) if blocks.is_dir() else []:
                shutil.copytree(block, storage / block.name)  # the next pass's private Prometheus reads it
                shutil.move(str(block), output_dir / block.name)
                written.append(output_dir / block.name)
    return written
