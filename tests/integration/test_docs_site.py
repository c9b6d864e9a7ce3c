"""The documentation site builds in strict mode and reads cleanly in headless Chromium, every page in the nav.

The site is built from this checkout with the docs venv's MkDocs (``scripts/docs`` installs it), served from a
loopback ``http.server``, and crawled from ``index.html`` through the navigation links only: each page is opened
in Debian's headless Chromium (``--dump-dom``, console logged to stderr), with every host but loopback made
unresolvable, so a font or script fetched from a CDN shows as a failed load. No page may log a console error or
fail a load, and the pages reached through the navigation must be every page built.
"""

from __future__ import annotations

import contextlib
import functools
import html.parser
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
MKDOCS = REPO / ".venv-docs" / "bin" / "mkdocs"

pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
    pytest.mark.skipif(not MKDOCS.exists(), reason="no .venv-docs: run ./scripts/docs (CP_OBSERVE_SKIP_DOCS skips it)"),
]

#: Chromium's own complaints about the sandbox it runs in (no D-Bus, no GPU), not the page's.
_NOISE = re.compile(r"dbus|gpu|GPU|Fontconfig|sandbox|viz_main|gl_display|angle|vaapi", re.I)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Page:
    """One page as Chromium rendered it."""

    url: str
    dom: str
    problems: list[str]


class _Links(html.parser.HTMLParser):
    """The hrefs of the navigation's links (Material's ``md-nav__link`` anchors)."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and "md-nav__link" in (values.get("class") or "").split() and values.get("href"):
            self.hrefs.append(values["href"] or "")


@contextlib.contextmanager
def serve_directory(directory: Path) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _page_requests(net_log: Path) -> list[str]:
    """The URLs the page itself requested (Chromium's own update and account checks have no page initiator)."""
    events = json.loads(net_log.read_text(encoding="utf-8"))["events"]
    return [e["params"]["url"] for e in events
            if "url" in e.get("params", {}) and e["params"].get("initiator") not in (None, "not an origin")]


def render(url: str) -> Page:
    """Open ``url`` in headless Chromium; the DOM after load, every console error, and any fetch off loopback."""
    profile = Path(tempfile.mkdtemp(prefix="cp-docs-chromium-"))
    try:
        done = subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={profile / 'user'}",
             "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", "--enable-logging=stderr", "--v=0",
             f"--log-net-log={profile / 'net.json'}", "--dump-dom", url],
            capture_output=True, text=True, timeout=120, check=False)
        requests = _page_requests(profile / "net.json")
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    problems = [f"exit status {done.returncode}"] if done.returncode else []
    problems += [f"fetched off loopback: {r}" for r in requests if not r.startswith("http://127.0.0.1:")]
    for line in done.stderr.splitlines():
        console = ":CONSOLE" in line and not line.split("]", 1)[0].endswith(("INFO:CONSOLE", "VERBOSE1:CONSOLE"))
        errored = ":CONSOLE" in line and re.search(r"\b(error|Error)\b", line) is not None
        failed = "Uncaught" in line or "Failed to load resource" in line or "net::ERR_" in line
        if (console or errored or failed) and not _NOISE.search(line):
            problems.append(line.strip())
    return Page(url, done.stdout, problems)


def nav_links(page: Page, root: str) -> set[str]:
    """The site pages the page's navigation links to (same origin, without fragments)."""
    parser = _Links()
    parser.feed(page.dom)
    out = set()
    for href in parser.hrefs:
        target = urllib.parse.urljoin(page.url, href).split("#", 1)[0]
        if target.startswith(root):
            out.add(target if target.endswith("/") or target.endswith(".html") else target + "/")
    return out


def crawl(root: str) -> dict[str, Page]:
    """Every page reachable from the root through navigation links, rendered."""
    seen: dict[str, Page] = {}
    frontier = {root}
    with ThreadPoolExecutor(max_workers=2) as pool:  # the machine has two cores
        while frontier:
            pages = list(pool.map(render, sorted(frontier)))
            seen.update((p.url, p) for p in pages)
            frontier = set().union(*(nav_links(p, root) for p in pages)) - set(seen)
    return seen


def _built_pages(site: Path, root: str) -> set[str]:
    return {root + p.parent.relative_to(site).as_posix().removeprefix(".") + ("/" if p.parent != site else "")
            for p in site.rglob("index.html")}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built from this checkout, strict, into a temporary directory."""
    out = tmp_path_factory.mktemp("docs") / "site"
    built = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True,
                           timeout=300, check=False)
    assert built.returncode == 0, built.stderr[-4000:]
    assert "WARNING" not in built.stderr, built.stderr[-4000:]
    return out


@pytest.mark.timeout(600)  # about 35 pages, two Chromium processes at a time, ~2 s each
def test_every_page_is_in_the_navigation_and_renders_without_error(site: Path) -> None:
    """Crawled from index.html through the nav, the pages are all the pages built, and none logs an error."""
    with serve_directory(site) as root:
        pages = crawl(root)
        built = _built_pages(site, root)
    assert len(built) > 25
    assert set(pages) == built, f"not in the navigation: {sorted(built - set(pages))}"
    problems = {url: page.problems for url, page in pages.items() if page.problems}
    assert not problems, problems
    for url, page in pages.items():
        assert "<h1" in page.dom and "md-content" in page.dom, url  # rendered, not an error page
    reference = pages[root + "reference/settings/"].dom
    assert "CP_OBSERVE_SAMPLE_RATE" in reference and "CP_OBSERVE_DURABLE_MAX_AGE_S" in reference
    assert "context_precision_score_squares_total" in pages[root + "reference/names/"].dom
    assert 'id="cp_observe.configure"' in pages[root + "reference/api/"].dom


def test_the_checks_catch_a_console_error_a_cdn_fetch_and_a_page_off_the_nav(tmp_path: Path) -> None:
    """A page logging an error, one fetching from a CDN, and one no nav link reaches are each reported."""
    (tmp_path / "index.html").write_text(
        '<html><body><nav><a class="md-nav__link" href="cdn/">cdn</a></nav>'
        "<script>console.error('broken on purpose')</script></body></html>", encoding="utf-8")
    (tmp_path / "cdn").mkdir()
    (tmp_path / "cdn" / "index.html").write_text(
        '<html><head><link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto"></head>'
        "<body>x</body></html>", encoding="utf-8")
    (tmp_path / "orphan").mkdir()
    (tmp_path / "orphan" / "index.html").write_text("<html><body>orphan</body></html>", encoding="utf-8")
    with serve_directory(tmp_path) as root:
        pages = crawl(root)
        built = _built_pages(tmp_path, root)
    assert any("broken on purpose" in p for p in pages[root].problems), pages[root].problems
    assert pages[root + "cdn/"].problems, "the CDN fetch was not reported"
    assert built - set(pages) == {root + "orphan/"}
