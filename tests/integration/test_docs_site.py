"""The documentation site builds in strict mode and reads cleanly in headless Chromium, every page in the nav.

The site is built from this checkout with the docs venv's MkDocs (``scripts/docs`` installs it), served from a
loopback ``http.server``, and crawled from ``index.html`` through the navigation links only: each page is opened
in Debian's headless Chromium, driven over the DevTools protocol, with every host but loopback made
unresolvable. No page may log a console error or warning, throw, fail a load or request anything off loopback
(a web font, a CDN script), and the pages reached through the navigation must be every page built.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import html.parser
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
MKDOCS = REPO / ".venv-docs" / "bin" / "mkdocs"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
    pytest.mark.skipif(not MKDOCS.exists(), reason="no .venv-docs: run ./scripts/docs (CP_OBSERVE_SKIP_DOCS skips it)"),
]



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


class Browser:
    """One headless Chromium, driven over the DevTools protocol (aiohttp's websocket client; no extra package).

    One browser for the whole crawl (a page loads in under a second, where a Chromium per page took two), and
    the protocol reports what ``--dump-dom`` cannot: every console message, uncaught exception, failed load
    and request the page makes, as it happens.
    """

    def __init__(self) -> None:
        self._profile = Path(tempfile.mkdtemp(prefix="cp-docs-chromium-"))
        self._process = subprocess.Popen(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={self._profile}",
             "--remote-debugging-port=0", "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []

    async def __aenter__(self) -> Browser:
        try:
            await self._connect()
        except BaseException:
            await self._stop()
            raise
        return self

    async def _connect(self) -> None:
        import aiohttp

        port_file = self._profile / "DevToolsActivePort"
        for _ in range(600):  # Chromium writes the port once it listens
            if port_file.exists() and "\n" in port_file.read_text():
                break
            await asyncio.sleep(0.05)
        port = port_file.read_text().split()[0]
        async with aiohttp.ClientSession() as probe, probe.get(f"http://127.0.0.1:{port}/json") as answer:
            targets = await answer.json()
        url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        self._session = aiohttp.ClientSession()
        self._ws = await self._session.ws_connect(url, max_msg_size=0)
        for domain in ("Page", "Runtime", "Log", "Network"):
            await self._call(f"{domain}.enable")

    async def __aexit__(self, *exc: object) -> None:
        await self._stop()

    async def _stop(self) -> None:
        if hasattr(self, "_ws"):
            await self._ws.close()
        if hasattr(self, "_session"):
            await self._session.close()
        self._process.terminate()
        self._process.wait(timeout=30)
        shutil.rmtree(self._profile, ignore_errors=True)

    async def _receive(self) -> dict[str, Any]:
        message = await asyncio.wait_for(self._ws.receive(), timeout=60)
        return dict(json.loads(message.data))

    async def _call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self._ws.send_json({"id": ident, "method": method, "params": params})
        while (message := await self._receive()).get("id") != ident:
            self._events.append(message)
        return dict(message.get("result", {}))

    async def render(self, url: str) -> Page:
        """Load ``url``; the DOM after load, and every console error, exception, failed load or outside fetch."""
        self._events.clear()
        await self._call("Page.navigate", url=url)
        while not any(e.get("method") == "Page.loadEventFired" for e in self._events):
            self._events.append(await self._receive())
        await asyncio.sleep(0.2)  # the theme's scripts run on load
        result = await self._call("Runtime.evaluate", expression="document.documentElement.outerHTML",
                                  returnByValue=True)
        problems = []
        for event in self._events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "warning", "assert"):
                problems.append(f"console.{params['type']}: {[a.get('value') for a in params['args']]}")
            elif method == "Runtime.exceptionThrown":
                problems.append(f"uncaught: {params['exceptionDetails'].get('text')}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                problems.append(f"{params['entry']['text']} ({params['entry'].get('url')})")
            elif method == "Network.requestWillBeSent":
                requested = params["request"]["url"]
                if requested.startswith(("http:", "https:", "ws:", "wss:")) and not requested.startswith(
                        "http://127.0.0.1:"):
                    problems.append(f"fetched off loopback: {requested}")
        return Page(url, str(result["result"]["value"]), problems)


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

    async def run() -> dict[str, Page]:
        seen: dict[str, Page] = {}
        frontier = [root]
        async with Browser() as browser:
            while frontier:
                url = frontier.pop()
                if url not in seen:
                    seen[url] = page = await browser.render(url)
                    frontier.extend(sorted(nav_links(page, root) - set(seen)))
        return seen

    return asyncio.run(run())


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


@pytest.mark.timeout(600)  # about 35 pages, about a second each
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
