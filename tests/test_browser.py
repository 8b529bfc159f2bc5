"""Open every page of the built book in headless Chromium, with the network closed.

Each page is opened once, and checked for everything: no JavaScript error in the console,
every image loads, every formula is typeset by the book's own MathJax, every link inside the
book leads to a page that exists (each link is fetched once per run), and nothing is fetched
from outside the loopback server. On a lesson page also: the Colab launch link points at its
notebook; no solution shows anything (code or output) until its dropdown is opened, and then
it does; the Colab setup cell is folded. With ``ATTNLIB_SCREENSHOTS=1`` (`make
screenshots`), a screenshot of each lesson page is saved to ``_build/screenshots/`` for
people to look at.

Needs Debian's ``chromium`` (``.ci/run`` installs it). Where it is missing the test skips,
saying so, except under ``CI=true`` (``.ci/run`` sets it), where a missing browser fails.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

import conventions
import translations

ROOT = Path(__file__).resolve().parent.parent


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOTS = ROOT / "_build" / "screenshots"
TAKE_SCREENSHOTS = os.environ.get("ATTNLIB_SCREENSHOTS") == "1"
#: Every page in both editions: English, and Chinese under zh/.
PAGES = conventions.toc_entries()
PAGES = PAGES + [f"zh/{page}" for page in PAGES]

ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None and not ON_CI,
        reason="no Chromium installed (apt-get install chromium); .ci/run installs it",
    ),
]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output clean
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """A browser that closes a connection early is not an error of the book."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def server(book_html):
    """Serve the built book on a free loopback port."""
    handler = functools.partial(QuietHandler, directory=str(book_html))
    httpd = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.fail("CI=true, but there is no Chromium: the browser test must run on CI")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def open_page(browser, server):
    """Open a book page offline; return (page, problems) where problems collects console
    errors, uncaught exceptions and any request that tried to leave the loopback server."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    problems: list[str] = []

    def only_loopback(route):
        if route.request.url.startswith(server):
            route.continue_()
        else:
            problems.append(f"network request outside the book: {route.request.url}")
            route.abort()

    context.route("**/*", only_loopback)

    def visit(path: str):
        page = context.new_page()
        page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
        page.on(
            "console",
            lambda message: (
                problems.append(f"console: {message.text}") if message.type == "error" else None
            ),
        )
        page.goto(f"{server}/{path}" + ("" if "?" in path else ".html"), wait_until="networkidle")
        if page.evaluate("typeof MathJax !== 'undefined'"):
            page.wait_for_function("window.MathJax.startup && MathJax.startup.promise")
            page.evaluate("MathJax.startup.promise")
        return page, problems

    yield visit
    context.close()


#: Links inside the book already found to lead to a page (each is fetched once per run).
REACHED: set[str] = set()


@pytest.mark.parametrize("path", PAGES)
def test_page_reads_offline(open_page, path):
    """Every page, opened once: it reads offline, and a lesson page also shows what a lesson
    promises (``check_lesson_page``)."""
    page, problems = open_page(path)
    broken = page.evaluate(
        "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))"
        ".map(i => i.src.slice(0, 80))"
    )
    assert not broken, f"images that did not load: {broken}"
    untypeset = page.evaluate(
        "Array.from(document.querySelectorAll('.math'))"
        ".filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 60))"
    )
    assert not untypeset, f"formulas left as raw TeX: {untypeset}"
    text = page.inner_text("article")
    assert "$$" not in text and "\\(" not in text, "raw math delimiters in the page text"
    links = page.evaluate(
        "Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"
        ".filter(h => h.startsWith(location.origin)).map(h => h.split('#')[0])"
    )
    dead = []
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only
    for url in sorted(set(links) - REACHED):
        try:
            direct.open(url, timeout=10).close()
            REACHED.add(url)
        except urllib.error.HTTPError:
            dead.append(url)
    assert not dead, f"links to missing pages: {dead}"
    if "lessons/" in path:
        check_lesson_page(page, path)
    assert not problems, problems


def solution_label(path: str) -> str:
    label = conventions.SOLUTION_METADATA["code_prompt_show"]
    return translations.PROMPTS[label] if path.startswith("zh/") else label


def solution_lines(path: str) -> list[str]:
    """For each solution cell of a lesson, its first line of code after the title."""
    nb = nbformat.read(ROOT / f"{path}.ipynb", as_version=4)
    return [
        next(line for line in cell.source.splitlines()[1:] if line.strip())
        for cell in nb.cells
        if conventions.SOLUTION_TAG in cell.metadata.get("tags", [])
    ]


def check_lesson_page(page, path: str) -> None:
    """The Colab launch link; no solution shows anything (code or output) until its dropdown
    is opened, and then it does; the Colab setup cell is folded. With
    ``ATTNLIB_SCREENSHOTS=1``, a screenshot of the whole page, with the solutions open, for
    people to look at."""
    colab = conventions.colab_url(f"{path}.ipynb")
    assert page.locator(f'a[href="{colab}"]').count() >= 1, f"no Colab link to {colab}"

    # Nothing of a solution is on the closed page: not its code, not anything it prints.
    hidden = solution_lines(path)
    closed = page.inner_text("article")
    assert not [line for line in hidden if line in closed], "a solution shows before it is opened"
    assert "attnlib_source = os.environ.get" not in closed, "the Colab setup cell is not folded"

    solutions = page.locator("details.hide", has_text=solution_label(path))
    assert solutions.count() == len(hidden) >= 3
    for i in range(solutions.count()):
        details = solutions.nth(i)
        details.locator("summary").click()
        assert details.evaluate("d => d.open"), f"solution {i + 1} did not open"
        assert details.locator("pre").first.is_visible()
    opened = page.inner_text("article")
    assert all(line in opened for line in hidden), "an opened solution does not show its code"

    if TAKE_SCREENSHOTS:  # 2 to 3 seconds a page: only when someone will look at them
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        name = ("zh-" if path.startswith("zh/") else "") + Path(path).name
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.mark.parametrize(("edition", "query"), [("", "positional encoding"), ("zh/", "自注意力")])
def test_search_finds_a_lesson(open_page, edition, query):
    """The search page (Chinese words segmented by jieba in the Chinese edition) lists lessons."""
    page, problems = open_page(f"{edition}search.html?q={query}")
    page.wait_for_selector("ul.search li a", timeout=20_000)
    found = page.evaluate(
        "Array.from(document.querySelectorAll('ul.search li a')).map(a => a.href)"
    )
    assert any(f"/{edition}lessons/" in href for href in found), found
    assert not problems, problems
