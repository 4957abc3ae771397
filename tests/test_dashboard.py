"""The analysts' dashboard (``GET /dashboard``, docs/dashboard.md).

1. With flask's test client: the page and its assets, their types and
   security headers, nothing from outside, nothing inline, no server data.
2. In a real headless Chromium (Python Playwright) against a real aggregator
   on loopback with a few hundred sealed simulated reports: token, metrics,
   collections, a round's participation, estimates (sorted), certificates,
   an API error, and where the token goes (never into a URL). Skips, saying
   why, when Chromium or Playwright is missing; installs nothing.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from flask import Flask

from aggregator import create_app
from aggregator.demo.local import LocalAggregator, SimulatedClients, local_aggregator, upload
from aggregator.research.populations import Population, SyntheticCity, make_population
from aggregator.server.api.dashboard import ASSETS, CONTENT_SECURITY_POLICY
from aggregator.server.openapi import app_operations, openapi_document
from protocol.crypto import AggregatorKeys
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.params import MetricParams
from protocol.rng import SeededRandom
from protocol.wire import window_start

ASSET_DIR = Path(__file__).resolve().parent.parent / "aggregator" / "server" / "dashboard"
SVG_NAMESPACE = "http://www.w3.org/2000/svg"  # a name in createElementNS, never fetched


# ==========================================================================
# 1. The page and its assets (flask test client)
# ==========================================================================


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    application = create_app({"data_dir": tmp_path}, keys=AggregatorKeys.generate())
    yield application
    application.extensions["onesided"].storage.close()


def _assert_secure(headers: Any) -> None:
    policy = headers["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["connect-src"] == "'self'" and directives["form-action"] == "'none'"
    assert "unsafe" not in policy
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"


def test_page_is_static_html_with_a_strict_policy(app: Flask) -> None:
    storage = app.extensions["onesided"].storage
    storage.put_metric(MetricParams(name="secret-metric", encoding=DirectEncoding(domain=("hidden-item",)),
                                    mode="asymmetric", level=1.0))
    answer = app.test_client().get("/dashboard")  # no token: the page is public and holds no data
    assert answer.status_code == 200
    assert answer.content_type == "text/html; charset=utf-8"
    assert answer.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    _assert_secure(answer.headers)
    html = answer.get_data(as_text=True)
    assert html == (ASSET_DIR / "index.html").read_text(encoding="utf-8")  # sent as it is: no template
    assert "secret-metric" not in html and "hidden-item" not in html
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, flags=re.S)
    assert scripts == [(' src="/dashboard/static/dashboard.js" defer', "")]  # no inline script
    assert "<style" not in html and not re.search(r"\sstyle=", html)
    assert not re.search(r"\son[a-z]+=", html)  # no inline event handler
    # the token field has no name: no form submission can carry it
    token_input = re.search(r'<input id="token"[^>]*>', html)
    assert token_input is not None and "name=" not in token_input.group(0)


def test_assets_are_served_with_their_types_and_headers(app: Flask) -> None:
    client = app.test_client()
    expected = {"dashboard.js": "text/javascript", "dashboard.css": "text/css", "favicon.svg": "image/svg+xml"}
    assert set(expected) == set(ASSETS)
    for name, mimetype in expected.items():
        answer = client.get(f"/dashboard/static/{name}")
        assert answer.status_code == 200, name
        assert answer.mimetype == mimetype, name
        assert answer.get_data() == (ASSET_DIR / name).read_bytes()
        _assert_secure(answer.headers)
    html = client.get("/dashboard").get_data(as_text=True)
    for referenced in re.findall(r'(?:src|href)="([^"#][^"]*)"', html):  # "#main": the skip link
        assert client.get(referenced).status_code == 200, referenced


@pytest.mark.parametrize("path", [
    "/dashboard/static/index.html.bak", "/dashboard/static/..%2Fapi%2Fdashboard.py",
    "/dashboard/static/../api/dashboard.py", "/dashboard/static/", "/dashboard/",
])
def test_other_paths_are_not_found(app: Flask, path: str) -> None:
    answer = app.test_client().get(path)
    assert answer.status_code == 404, path
    assert answer.get_json()["error"] == "not_found"


def test_the_page_needs_nothing_from_outside() -> None:
    """Offline: no URL with a host (the SVG namespace is a name), no CDN, no web font, no @import, no eval."""
    for name in ("index.html", "dashboard.js", "dashboard.css"):
        text = (ASSET_DIR / name).read_text(encoding="utf-8").replace(f'"{SVG_NAMESPACE}"', '""')
        assert not re.search(r"https?:|(?<![:\w/])//[a-z0-9.-]+\.[a-z]{2,}", text, flags=re.I), name
        assert "@import" not in text and "@font-face" not in text, name
    script = (ASSET_DIR / "dashboard.js").read_text(encoding="utf-8")
    assert not re.search(r"\binnerHTML\b|\bouterHTML\b|insertAdjacentHTML|document\.write|\beval\(|new Function",
                         script)
    assert "localStorage" not in script and "document.cookie" not in script


def test_the_page_is_not_part_of_the_v1_api(app: Flask) -> None:
    document = openapi_document()
    assert not [p for p in document["paths"] if p.startswith("/dashboard")]
    assert not [p for p, _ in app_operations(app, prefix="/") if p.startswith("/dashboard")
                and p not in ("/dashboard", "/dashboard/static/{name}")]
    assert ("/dashboard", "get") in app_operations(app, prefix="/dashboard")


# ==========================================================================
# 2. A real browser against a real aggregator
# ==========================================================================

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
CLIENTS = 300
IN_ROUND = 240  # clients that report in the round: participation 80%
BLOOM_CLIENTS = 200
BLOOM_CANDIDATES = ["place-00", "place-03", "never-visited, with a comma"]
ODD_NAME = '<img src=x onerror="document.title=\'pwned\'"> & "quotes"'


@dataclass(frozen=True, kw_only=True)
class Scenario:
    agg: LocalAggregator
    window: int
    round_id: int
    domain: tuple[str, ...]


def _population(domain: tuple[str, ...], city: SyntheticCity) -> Population:
    """The city's clients under the names ``domain`` (a direct encoding's bits follow the order only)."""
    drawn = make_population(city, CLIENTS, DirectEncoding(domain=tuple(city.names())), SeededRandom(2031))
    return Population(item_sets=drawn.item_sets, cohorts=drawn.cohorts, bits=drawn.bits, names=domain)


def _bloom_metric(agg: LocalAggregator, window: int) -> None:
    """A Bloom metric ("urls", 4 cohorts) with 200 reports in ``window``, round 0."""
    params = MetricParams(name="urls", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                          mode="asymmetric", level=2.0, min_batch_size=100)
    digest = agg.admin.post("/v1/metrics", params.to_dict())["digest"]
    city = SyntheticCity(num_places=16, zipf_exponent=1.1, mean_places=2.0)
    population = make_population(city, BLOOM_CLIENTS, params.encoding, SeededRandom(2032))
    secrets = [hashlib.sha256(f"dashboard-bloom-{i}".encode()).digest() for i in range(BLOOM_CLIENTS)]
    sim = SimulatedClients(params=params, digest=digest, population=population, first=0, secrets=secrets,
                           ceilings=np.full(BLOOM_CLIENTS, 10.0))
    sent = upload(agg.url, sim.reports(levels=[2.0], round_id=0, seal_public=agg.keys.seal_public_raw,
                                       window=window, who=np.arange(BLOOM_CLIENTS)),
                  total=BLOOM_CLIENTS, progress=lambda n: None)
    assert sent == {"accepted": BLOOM_CLIENTS}


@pytest.fixture
def scenario(tmp_path: Path) -> Iterator[Scenario]:
    """A direct asymmetric metric: 300 reports at level 1, a round to level 4 with 240 reports, closed."""
    city = SyntheticCity(num_places=40, zipf_exponent=1.1, mean_places=3.0)
    domain = list(city.names())
    domain[7] = ODD_NAME
    params = MetricParams(name="places", encoding=DirectEncoding(domain=tuple(domain)), mode="asymmetric",
                          level=1.0, min_batch_size=100)
    data_dir = tmp_path / "agg"
    data_dir.mkdir(mode=0o700)  # private: it holds the aggregator's keys and raw reports
    with local_aggregator(data_dir) as agg:
        digest = agg.admin.post("/v1/metrics", params.to_dict())["digest"]
        secrets = [hashlib.sha256(f"dashboard-client-{i}".encode()).digest() for i in range(CLIENTS)]
        sim = SimulatedClients(params=params, digest=digest, population=_population(tuple(domain), city), first=0,
                               secrets=secrets, ceilings=np.full(CLIENTS, 10.0))
        window = window_start(time.time(), params.time_precision)
        seal = agg.keys.seal_public_raw
        sent = upload(agg.url, sim.reports(levels=[1.0], round_id=0, seal_public=seal, window=window,
                                           who=np.arange(CLIENTS)), total=CLIENTS, progress=lambda n: None)
        assert sent == {"accepted": CLIENTS}
        round_id = int(agg.admin.post("/v1/metrics/places/rounds", {"level_to": 4.0})["id"])
        sent = upload(agg.url, sim.reports(levels=[1.0, 4.0], round_id=round_id, seal_public=seal, window=window,
                                           who=np.arange(IN_ROUND)), total=IN_ROUND, progress=lambda n: None)
        assert sent == {"accepted": IN_ROUND}
        agg.admin.post(f"/v1/rounds/{round_id}/close")
        empty = MetricParams(name="empty", encoding=DirectEncoding(domain=("a", "b")), mode="asymmetric", level=1.0)
        agg.admin.post("/v1/metrics", empty.to_dict())
        _bloom_metric(agg, window)
        yield Scenario(agg=agg, window=window, round_id=round_id, domain=tuple(domain))


def launch_chromium() -> Iterator[Any]:
    """Debian's Chromium under Playwright (never a downloaded browser); skips, saying why, without it."""
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="Python Playwright is not installed (pip install playwright)")
    with sync_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from launch_chromium()


def _api_error(agg: LocalAggregator, path: str, params: dict[str, Any]) -> dict[str, Any]:
    answer = requests.get(agg.url + path, params=params, headers={"Authorization": f"Bearer {agg.analyst.token}"},
                          timeout=30)
    assert answer.status_code == 400
    body = answer.json()
    assert isinstance(body, dict)
    return body


def test_dashboard_in_a_real_browser(browser: Any, scenario: Scenario, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    agg, window, round_id = scenario.agg, scenario.window, scenario.round_id
    token = agg.analyst.token
    assert token
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    urls: list[str] = []
    problems: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(str(e)))

    # token -> metrics
    page.goto(agg.url + "/dashboard")
    expect(page.locator("#metrics-section")).to_be_hidden()
    page.fill("#token", token)
    page.click("#token-use")
    metric_row = page.locator("#metrics-table tbody tr").filter(has=page.locator("button[data-metric='places']"))
    expect(metric_row).to_contain_text("asymmetric")
    expect(metric_row).to_contain_text("direct, 40 items")
    expect(metric_row.locator("td.num")).to_have_text(str(CLIENTS + IN_ROUND))

    # the metric: collections (window x round) and the round's participation
    page.click("#metrics-table button[data-metric='places']")
    cell = "#collections-table button[data-window='{}'][data-round='{}']"
    expect(page.locator(cell.format(window, 0))).to_have_text(str(CLIENTS))
    expect(page.locator(cell.format(window, round_id))).to_have_text(str(IN_ROUND))
    page.click("#tab-rounds")
    card = page.locator(f".round[data-round='{round_id}']")
    expect(card.locator("h4")).to_have_text(f"round {round_id} · level 1 → 4")
    expect(card).to_contain_text("closed")
    cohorts = card.locator("svg.participation g.cohort")
    expect(cohorts).to_have_count(1)  # a direct metric has one cohort
    expect(cohorts.locator("text.value")).to_have_text(f"{IN_ROUND} / {CLIENTS} (80%) · {CLIENTS - IN_ROUND} not in")
    width = cohorts.evaluate("g => g.querySelector('.fill').getBBox().width / g.querySelector('.track').getBBox().width")
    assert abs(width - IN_ROUND / CLIENTS) < 0.01

    # estimates of the round's collection: all items, the API's top item first, then sorted ascending
    api_rows = agg.analyst.get("/v1/metrics/places/estimates", {"window": window, "round": round_id})["rows"]
    page.click(cell.format(window, round_id))  # back to the estimates view, that collection decoded
    expect(page.locator("#view-estimates")).to_be_visible()
    page.click("#est-as-table")
    rows = page.locator("#estimates-table tbody tr")
    expect(rows).to_have_count(len(scenario.domain))
    expect(rows.first.locator("td.candidate")).to_have_text(api_rows[0]["candidate"])
    expect(rows.first.locator("td.estimate")).to_have_text(f"{api_rows[0]['estimate']:.1f}")
    expect(page.locator("#estimates-summary")).to_contain_text(f"round {round_id} · level 4")
    detected = sum(r["detected"] for r in api_rows)
    expect(page.locator("#estimates-summary")).to_contain_text(f"{detected} detected")
    expect(page.locator("#estimates-table tbody tr.detected")).to_have_count(detected)
    page.click("#estimates-table button[data-sort='estimate']")
    lowest = min(r["estimate"] for r in api_rows)
    expect(rows.first.locator("td.estimate")).to_have_text(f"{lowest:.1f}")
    expect(page.locator("#estimates-table th[aria-sort='ascending']")).to_have_count(1)
    page.check("#detected-only")
    expect(rows).to_have_count(detected)
    page.uncheck("#detected-only")
    expect(rows).to_have_count(len(scenario.domain))
    # an API string with markup is shown as text, never parsed
    odd = page.locator("#estimates-table td.candidate").filter(has_text="quotes")
    expect(odd).to_have_text(ODD_NAME)
    expect(page.locator("#estimates-table img, #estimates-chart img")).to_have_count(0)

    # certificates for a typed threshold and alpha
    certificates = agg.analyst.get("/v1/metrics/places/certificates",
                                   {"window": window, "round": round_id, "threshold": 40, "alpha": 0.01})
    safe = [r["candidate"] for r in certificates["rows"] if r["safe"]]
    page.click("#tab-certificates")
    page.fill("#threshold", "40")
    page.fill("#cert-alpha", "0.01")
    page.click("#cert-load")
    expect(page.locator("#certificates-summary")).to_contain_text(
        f"{certificates['safe']} safe, {len(scenario.domain) - certificates['safe']} obscure")
    expect(page.locator("#safe-list li")).to_have_text(safe)
    expect(page.locator("#message")).to_be_hidden()

    # an API error is shown: code, field and detail
    wrong = _api_error(agg, "/v1/metrics/places/certificates", {"threshold": -1, "alpha": 0.01})
    page.fill("#threshold", "-1")
    page.click("#cert-load")
    message = page.locator("#message")
    expect(message).to_be_visible()
    expect(message).to_contain_text(f"HTTP 400 {wrong['error']}")
    expect(message.locator(".field")).to_have_text("threshold")
    expect(message.locator(".detail")).to_have_text(wrong["detail"])
    expect(page.locator("#certificates-summary")).to_have_text("")  # no stale certificates beside the error
    expect(page.locator("#certificates-result")).to_be_hidden()
    page.evaluate("window.scrollTo(0, 0)")  # the message is sticky: shoot it in its own place
    page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
    assert (tmp_path / "dashboard.png").stat().st_size > 20_000
    message.locator("button.close").click()
    expect(message).to_be_hidden()

    # a Bloom metric: the candidates typed in the textarea are decoded (sent in a JSON body)
    page.click("#metrics-table button[data-metric='urls']")
    expect(page.locator("#candidates-box")).to_be_visible()
    page.fill("#candidates", "\n".join(BLOOM_CANDIDATES) + "\n\n")
    page.click("#est-load")
    bloom = requests.post(agg.url + "/v1/metrics/urls/estimates", json={"candidates": BLOOM_CANDIDATES},
                          headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
    expect(rows).to_have_count(len(BLOOM_CANDIDATES))
    # the order chosen above stays; one more click: largest first again
    page.click("#estimates-table button[data-sort='estimate']")
    expect(page.locator("#estimates-table th[aria-sort='descending']")).to_have_count(1)
    table = page.locator("#estimates-table")
    expect(table.locator("td.candidate")).to_have_text([r["candidate"] for r in bloom["rows"]])
    expect(table.locator("td.estimate")).to_have_text([f"{r['estimate']:.1f}" for r in bloom["rows"]])

    # a metric without reports: no collection, no round, a reason instead of numbers
    page.click("#metrics-table button[data-metric='empty']")
    expect(page.locator("#metric-name")).to_have_text("empty")
    expect(page.locator("#collections-empty")).to_be_visible()
    page.click("#tab-rounds")
    expect(page.locator("#rounds-empty")).to_be_visible()
    expect(page.locator("#compare-form")).to_be_hidden()
    page.click("#tab-estimates")
    page.click("#est-load")
    expect(page.locator("#estimates-summary")).to_contain_text("has no reports yet; no estimate is released")
    expect(page.locator("#estimates-table")).to_be_hidden()
    expect(message).to_be_hidden()

    # where the token went: this tab's session storage, headers; never a URL, local storage or cookie
    assert page.evaluate("sessionStorage.getItem('onesided.analystToken')") == token
    assert page.evaluate("localStorage.length") == 0 and page.context.cookies() == []
    assert page.title() == "onesided · analysts' dashboard"
    page.reload()  # the tab keeps its token
    expect(page.locator("#metrics-table button[data-metric='places']")).to_be_visible()
    page.click("#token-forget")
    expect(page.locator("#metrics-section")).to_be_hidden()
    assert page.evaluate("sessionStorage.length") == 0
    assert urls and all(token not in url and token[-12:] not in url for url in urls), urls
    assert {u.split("?")[0].removeprefix(agg.url) for u in urls} >= {
        "/dashboard", "/dashboard/static/dashboard.js", "/v1/metrics", "/v1/metrics/places",
        f"/v1/rounds/{round_id}", "/v1/metrics/places/estimates", "/v1/metrics/places/certificates",
    }
    # the one console error is the 400 answer itself; nothing else (no CSP violation, no script error)
    assert [p for p in problems if "status of 400" not in p] == [], problems

    # a wrong token: 401 shown, the token not kept
    page.fill("#token", "ons_wrong-token")
    page.click("#token-use")
    expect(message).to_contain_text("HTTP 401 unauthorized")
    assert page.evaluate("sessionStorage.length") == 0
    page.close()
