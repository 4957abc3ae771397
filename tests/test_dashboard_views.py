"""The dashboard's pictures, in a real headless Chromium (docs/dashboard.md 5).

One aggregator for the module (a few seconds to fill), one browser, one
logged-in page the view tests share:

* ``places``: a direct asymmetric metric over 36 places named
  ``zone/pNN@x,y`` (a 6 x 6 map in three zones); 300 base reports at level
  1, a closed round to level 4 with 240 of them (60 did not take part).
* ``shops``: a direct asymmetric metric named ``group/name`` only (no
  coordinates); 200 base reports.
* ``visits``: a trusted direct metric (12 places, 200 exact reports) with two
  releases of the analyst: AGeo at epsilon 1, ALap relaxed 0.5 -> 1.5.

Each view is driven and what is drawn is checked against the API (bars,
labels, detected and safe counts, the detection threshold, participation,
budgets); a screenshot of each is saved in the module's temporary folder.
Keyboard-only use and the text contrast (WCAG AA, >= 4.5:1) are checked too.
Skips, saying why, when Chromium or Playwright is missing; installs nothing.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from aggsupport import make_reports, post_reports
from scipy.stats import norm
from test_dashboard import launch_chromium

from aggregator.analysis.tables import ESTIMATE_COLUMNS
from aggregator.demo.local import LocalAggregator, SimulatedClients, local_aggregator, upload
from aggregator.research.populations import Population, SyntheticCity, make_population
from protocol.encodings import DirectEncoding
from protocol.params import MetricParams
from protocol.rng import SeededRandom
from protocol.wire import window_start

SIDE = 6  # the places metric is a SIDE x SIDE map
ZONES = ("north", "centre", "south")  # two map rows each
CLIENTS = 300
IN_ROUND = 240
SHOPS = tuple(f"{g}/shop-{i}" for g in ("old-town", "harbour", "hills") for i in range(8))
VISITS = tuple(f"place-{i:02d}" for i in range(12))
THRESHOLD = 40
RELEASE_THRESHOLD = 60
MIN_CONTRAST = 4.5  # WCAG 2 AA, normal text


def place_names() -> tuple[str, ...]:
    """``zone/pNN@x,y`` with y = 0 the southern row."""
    return tuple(f"{ZONES[(SIDE - 1 - y) // 2]}/p{y * SIDE + x:02d}@{x},{y}" for y in range(SIDE) for x in range(SIDE))


@dataclass(frozen=True, kw_only=True)
class World:
    agg: LocalAggregator
    window: int
    round_id: int

    def get(self, path: str, **params: Any) -> Any:
        return self.agg.analyst.get(path, params)


def _simulate(agg: LocalAggregator, params: MetricParams, clients: int, seed: int) -> SimulatedClients:
    digest = agg.admin.post("/v1/metrics", params.to_dict())["digest"]
    domain = tuple(params.encoding.domain)  # type: ignore[union-attr]
    city = SyntheticCity(num_places=len(domain), zipf_exponent=1.1, mean_places=3.0)
    drawn = make_population(city, clients, DirectEncoding(domain=tuple(city.names())), SeededRandom(seed))
    population = Population(item_sets=drawn.item_sets, cohorts=drawn.cohorts, bits=drawn.bits, names=domain)
    secrets = [hashlib.sha256(f"dashboard-views-{seed}-{i}".encode()).digest() for i in range(clients)]
    return SimulatedClients(params=params, digest=digest, population=population, first=0, secrets=secrets,
                            ceilings=np.full(clients, 10.0))


def _send(agg: LocalAggregator, sim: SimulatedClients, levels: list[float], round_id: int, window: int,
          who: int) -> None:
    sent = upload(agg.url, sim.reports(levels=levels, round_id=round_id, seal_public=agg.keys.seal_public_raw,
                                       window=window, who=np.arange(who)), total=who, progress=lambda n: None)
    assert sent == {"accepted": who}


def _trusted_with_releases(agg: LocalAggregator) -> None:
    params = MetricParams(name="visits", encoding=DirectEncoding(domain=VISITS), mode="trusted", level=math.inf,
                          time_precision=3600, max_items=4)
    agg.admin.post("/v1/metrics", params.to_dict())
    window = window_start(time.time(), params.time_precision)
    reports = make_reports(params, agg.keys.seal_public_raw, 200, seed=41, window=window)
    assert post_reports(agg.url, reports.envelopes).json()["accepted"] == 200
    release = {"metric": "visits", "window": window, "threshold": RELEASE_THRESHOLD}
    agg.analyst.post("/v1/releases", {**release, "mechanism": "ageo", "epsilon": 1.0})
    made = agg.analyst.post("/v1/releases", {**release, "mechanism": "alap", "epsilon": 0.5})
    agg.analyst.post(f"/v1/releases/{made['id']}/relax", {"epsilon": 1.5})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with local_aggregator(tmp_path_factory.mktemp("agg")) as agg:
        places = MetricParams(name="places", encoding=DirectEncoding(domain=place_names()), mode="asymmetric",
                              level=1.0, min_batch_size=100)
        window = window_start(time.time(), places.time_precision)
        sim = _simulate(agg, places, CLIENTS, seed=2041)
        _send(agg, sim, [1.0], 0, window, CLIENTS)
        round_id = int(agg.admin.post("/v1/metrics/places/rounds", {"level_to": 4.0})["id"])
        _send(agg, sim, [1.0, 4.0], round_id, window, IN_ROUND)
        agg.admin.post(f"/v1/rounds/{round_id}/close")
        shops = MetricParams(name="shops", encoding=DirectEncoding(domain=SHOPS), mode="asymmetric", level=2.0,
                             min_batch_size=100)
        _send(agg, _simulate(agg, shops, 200, seed=2042), [2.0], 0, window, 200)
        _trusted_with_releases(agg)
        yield World(agg=agg, window=window, round_id=round_id)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch_chromium()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def page(browser: Any, world: World) -> Iterator[Any]:
    """One tab, token given, console watched: no script error, no CSP violation, ever."""
    tab = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    problems: list[str] = []
    tab.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    tab.on("pageerror", lambda e: problems.append(str(e)))
    tab.goto(world.agg.url + "/dashboard")
    tab.fill("#token", world.agg.analyst.token or "")
    tab.click("#token-use")
    tab.locator("#metrics-table button[data-metric='places']").wait_for()
    yield tab
    tab.close()
    assert problems == [], problems


def choose(page: Any, metric: str) -> None:
    from playwright.sync_api import expect

    page.click(f"#metrics-table button[data-metric='{metric}']")
    expect(page.locator("#metric-name")).to_have_text(metric)


def shoot(page: Any, shots: Path, name: str, selector: str = "#metric-section") -> Path:
    path = shots / f"{name}.png"
    page.locator(selector).screenshot(path=str(path))
    assert path.stat().st_size > 10_000
    return path


# ==========================================================================
# The views
# ==========================================================================


def test_estimates_as_a_ranked_chart(page: Any, world: World, shots: Path) -> None:
    from playwright.sync_api import expect

    api = world.get("/v1/metrics/places/estimates")  # the page's default: latest finished round
    choose(page, "places")  # a direct metric's estimates are drawn at once
    chart = page.locator("#estimates-chart svg.estimates")
    bars = chart.locator("g.bar-row")
    expect(bars).to_have_count(len(place_names()))  # top 40 of 36
    page.select_option("#est-top", "20")
    expect(bars).to_have_count(20)
    top = api["rows"][:20]
    expect(bars.locator("text.label")).to_have_text([r["candidate"] for r in top])
    expect(bars.locator("text.value")).to_have_text([f"{r['estimate']:.1f}" for r in top])
    expect(chart.locator("g.bar-row.detected")).to_have_count(sum(r["detected"] for r in top))
    # the bars rank the estimates: their lengths from the zero line are monotone
    widths = bars.locator("rect.bar").evaluate_all("rs => rs.map(r => r.getBBox().width)")
    assert widths == sorted(widths, reverse=True)
    # the detection threshold: z * median se with 1 - Phi(z) = alpha / m (Bonferroni)
    z = norm.isf(api["alpha"] / api["candidates"])
    threshold = z * statistics.median(r["std_error"] for r in api["rows"])
    expect(chart.locator("text.threshold-label")).to_have_text(f"≈ {threshold:.1f}")
    expect(chart.locator("line.threshold")).to_have_count(1)
    expect(page.locator("#estimates-caption")).to_contain_text(f"z = {z:.2f}")
    # hover shows the number; no truth anywhere (the page has none to show)
    bars.nth(2).hover()
    tip = page.locator("#chart-tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text(f"{top[2]['candidate']}: estimate {top[2]['estimate']:.1f} ± {top[2]['std_error']:.1f}")
    shoot(page, shots, "estimates-chart")
    page.mouse.move(0, 0)

    # the table, one click away, and the API's CSV
    page.click("#est-as-table")
    expect(page.locator("#estimates-figure")).to_be_hidden()
    expect(page.locator("#estimates-table tbody tr")).to_have_count(len(api["rows"]))
    with page.expect_download() as caught:
        page.click("#est-csv")
    download = caught.value
    assert download.suggested_filename == f"places-estimates-window{world.window}-round{world.round_id}.csv"
    lines = list(csv.reader(io.StringIO(Path(download.path()).read_text(encoding="utf-8"))))
    assert tuple(lines[0]) == ESTIMATE_COLUMNS
    assert [line[0] for line in lines[1:]] == [r["candidate"] for r in api["rows"]]
    page.click("#est-as-chart")
    expect(page.locator("#estimates-table")).to_be_hidden()
    expect(chart).to_be_visible()


def test_certificates_as_a_map_and_as_groups(page: Any, world: World, shots: Path) -> None:
    from playwright.sync_api import expect

    choose(page, "places")
    page.click("#tab-certificates")
    page.fill("#threshold", str(THRESHOLD))
    page.fill("#cert-alpha", "0.01")
    page.click("#cert-load")
    api = world.get("/v1/metrics/places/certificates", threshold=THRESHOLD, alpha=0.01)
    picture = page.locator("#cert-map svg")
    expect(picture).to_have_attribute("data-layout", "map")
    expect(picture.locator("g.cell-item")).to_have_count(SIDE * SIDE)
    expect(picture.locator("g.cell-item.safe")).to_have_count(api["safe"])
    assert 0 < api["safe"] < SIDE * SIDE  # both colours are on the picture
    counts = page.locator("#cert-counts svg")
    expect(counts.locator("text.safe-count")).to_have_text(f"{api['safe']} certified safe")
    expect(counts.locator("text.obscure-count")).to_have_text(f"{SIDE * SIDE - api['safe']} not certified")
    # each square where its @x,y says (y up): the map's corners
    corner = picture.locator("g.cell-item[data-candidate$='@0,0'] rect.cell")
    far = picture.locator("g.cell-item[data-candidate$='@5,5'] rect.cell")
    assert float(corner.get_attribute("y") or 0) > float(far.get_attribute("y") or 0)
    assert float(corner.get_attribute("x") or 0) < float(far.get_attribute("x") or 0)
    safe = [r["candidate"] for r in api["rows"] if r["safe"]]
    expect(page.locator("#safe-list li")).to_have_text(safe)
    first = api["rows"][0]
    picture.locator(f"g.cell-item[data-candidate='{first['candidate']}']").hover()
    expect(page.locator("#chart-tip")).to_contain_text(f"upper bound {first['upper_bound']}")
    shoot(page, shots, "certificates-map")
    page.mouse.move(0, 0)

    choose(page, "shops")  # "group/name": one block per group, its safe count in its title
    page.click("#tab-certificates")
    page.fill("#threshold", str(THRESHOLD))
    page.click("#cert-load")
    shops = world.get("/v1/metrics/shops/certificates", threshold=THRESHOLD, alpha=0.01)
    expect(picture).to_have_attribute("data-layout", "groups")
    titles = []
    for group in ("old-town", "harbour", "hills"):
        members = [r for r in shops["rows"] if r["candidate"].startswith(group + "/")]
        titles.append(f"{group} · {sum(r['safe'] for r in members)} of {len(members)} safe")
    expect(picture.locator("text.group-label")).to_have_text(titles)
    expect(picture.locator("g.cell-item.safe")).to_have_count(shops["safe"])
    shoot(page, shots, "certificates-groups")


def test_rounds_side_by_side(page: Any, world: World, shots: Path) -> None:
    from playwright.sync_api import expect

    choose(page, "places")
    page.click("#tab-rounds")
    card = page.locator(f".round[data-round='{world.round_id}']")
    expect(card.locator("h4")).to_have_text(f"round {world.round_id} · level 1 → 4")
    expect(card).to_contain_text(f"{CLIENTS - IN_ROUND} did not take part (refused or absent)")
    cohort = card.locator("svg.participation g.cohort")
    expect(cohort).to_have_count(1)  # a direct metric has one cohort
    expect(cohort.locator("text.value")).to_have_text(f"{IN_ROUND} / {CLIENTS} (80%) · {CLIENTS - IN_ROUND} not in")
    share = cohort.evaluate("g => g.querySelector('.fill').getBBox().width / g.querySelector('.track').getBBox().width")
    assert abs(share - IN_ROUND / CLIENTS) < 0.01

    page.select_option("#compare-round", str(world.round_id))
    page.click("#compare-load")
    before = world.get("/v1/metrics/places/estimates", round=0)
    after = world.get("/v1/metrics/places/estimates", round=world.round_id)
    pairs = page.locator("#compare-chart svg.compare g.pair")
    expect(pairs).to_have_count(30)
    expect(pairs.locator("text.label")).to_have_text([r["candidate"] for r in after["rows"][:30]])
    se0 = statistics.median(r["std_error"] for r in before["rows"])
    se1 = statistics.median(r["std_error"] for r in after["rows"])
    assert se1 < se0  # a looser level: the error bars shrink
    expect(page.locator("#compare-summary")).to_contain_text(
        f"median std error {se0:.1f} → {se1:.1f} (×{se1 / se0:.2f})")
    widths = pairs.evaluate_all("gs => gs.map(g => [...g.querySelectorAll('.interval')].map("
                                "i => i.getBBox().width))")
    assert all(after_w < before_w for before_w, after_w in widths)  # drawn shorter, every one
    shoot(page, shots, "rounds")


def test_releases_and_budget(page: Any, world: World, shots: Path) -> None:
    from playwright.sync_api import expect

    choose(page, "visits")
    expect(page.locator("#tab-releases")).to_have_attribute("aria-selected", "true")
    for hidden in ("estimates", "certificates", "rounds"):  # a trusted metric's counts are released only
        expect(page.locator(f"#tab-{hidden}")).to_be_hidden()
    releases = sorted(world.get("/v1/releases", metric="visits")["releases"], key=lambda r: -r["id"])
    budget = world.get("/v1/releases/budget", metric="visits", window=releases[0]["window"])
    assert budget["spent"] == 2.5
    row = page.locator(f"svg.budget g.budget-row[data-window='{budget['window']}'] text.value")
    expect(row).to_have_text(f"spent {budget['spent']:.2f} of {budget['limit']:.2f} · "
                             f"remaining {budget['remaining']:.2f}")
    cards = page.locator("#releases article.release")
    expect(cards.locator("h4")).to_have_text([
        f"release {r['id']} · {r['mechanism']} · epsilon {r['epsilon']:g}"
        + (" (relaxed " + " → ".join(f"{v:g}" for v in r["levels"]) + ")" if len(r["levels"]) > 1 else "")
        for r in releases
    ])
    for card, release in zip(cards.all(), releases, strict=True):
        safe = sum(a["safe"] is True for a in release["answers"])
        expect(card.locator(".release-summary")).to_contain_text(
            f"grid {release['grid']:g} · sensitivity {release['sensitivity']:g}")
        expect(card.locator(".release-summary")).to_contain_text(f"{safe} of {len(VISITS)} places safe")
        expect(card.locator("svg.answers g.answer")).to_have_count(len(VISITS))
        expect(card.locator("svg.answers g.answer.safe")).to_have_count(safe)
        expect(card.locator("svg.answers line.threshold")).to_have_count(1)
    shoot(page, shots, "releases")


# ==========================================================================
# Keyboard only, and contrast
# ==========================================================================


def _tab_to(page: Any, selector: str, limit: int = 80) -> None:
    """Press Tab until the focused element matches ``selector``."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("s => document.activeElement && document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"{selector} is not reachable with Tab")


def test_keyboard_only(browser: Any, world: World, shots: Path) -> None:
    from playwright.sync_api import expect

    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        tab.goto(world.agg.url + "/dashboard")
        _tab_to(tab, "#token")
        tab.keyboard.type(world.agg.analyst.token or "")
        tab.keyboard.press("Enter")
        _tab_to(tab, "button[data-metric='places']")
        tab.keyboard.press("Enter")
        expect(tab.locator("#estimates-chart svg g.bar-row").first).to_be_visible()
        api = world.get("/v1/metrics/places/estimates")["rows"]
        tip = tab.locator("#chart-tip")

        _tab_to(tab, "#estimates-chart svg")  # one tab stop; the arrows walk the bars
        expect(tip).to_contain_text(f"{api[0]['candidate']}: estimate {api[0]['estimate']:.1f}")
        tab.keyboard.press("ArrowDown")
        tab.keyboard.press("ArrowDown")
        expect(tip).to_contain_text(f"{api[2]['candidate']}: estimate {api[2]['estimate']:.1f}")
        tab.keyboard.press("End")
        expect(tip).to_contain_text(f"{api[-1]['candidate']}: estimate")
        tab.keyboard.press("Escape")
        expect(tip).to_be_hidden()

        _tab_to(tab, "#tab-estimates")  # the tabs: one stop, arrows move between views
        tab.keyboard.press("ArrowRight")
        expect(tab.locator("#tab-certificates")).to_be_focused()
        expect(tab.locator("#view-certificates")).to_be_visible()
        _tab_to(tab, "#threshold")
        tab.keyboard.type(str(THRESHOLD))
        tab.keyboard.press("Enter")
        expect(tab.locator("#cert-map svg g.cell-item")).to_have_count(SIDE * SIDE)
        _tab_to(tab, "#cert-map svg")
        expect(tip).to_contain_text("upper bound")
        tab.screenshot(path=str(shots / "keyboard.png"))
        tab.keyboard.press("Shift+Tab")
        expect(tip).to_be_hidden()

        _tab_to(tab, "#tab-certificates")
        tab.keyboard.press("ArrowRight")
        expect(tab.locator("#view-rounds")).to_be_visible()
        _tab_to(tab, "#compare-round")
        _tab_to(tab, "#compare-load")
        tab.keyboard.press("Enter")
        expect(tab.locator("#compare-chart svg g.pair")).to_have_count(30)
    finally:
        tab.close()


# Every visible text's colour against the first opaque background behind it (an SVG
# text's: the chart's), as WCAG 2 defines the ratio.
CONTRASTS = """() => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const ground = (node) => {
    for (let n = node; n; n = n.parentElement) {
      const c = rgb(getComputedStyle(n).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0.5)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const text = walker.currentNode;
    const node = text.parentElement;
    if (!text.textContent.trim() || !node || node.closest("[hidden], title, script, noscript, option")) continue;
    const box = node.getBoundingClientRect();
    if (!box.width || !box.height || getComputedStyle(node).visibility === "hidden") continue;
    const style = getComputedStyle(node);
    const colour = rgb(node instanceof SVGElement ? style.fill : style.color).slice(0, 3);
    const [a, b] = [lum(colour), lum(ground(node))].sort((x, y) => y - x);
    out.push([text.textContent.trim().slice(0, 40), (a + 0.05) / (b + 0.05)]);
  }
  return out;
}"""


def test_text_contrast_in_every_view(page: Any, world: World) -> None:
    from playwright.sync_api import expect

    checked: list[tuple[str, float]] = []
    choose(page, "places")
    expect(page.locator("#estimates-chart svg")).to_be_visible()
    for view in ("estimates", "certificates", "rounds"):
        page.click(f"#tab-{view}")
        if view == "certificates":
            page.fill("#threshold", str(THRESHOLD))
            page.click("#cert-load")
            expect(page.locator("#cert-map svg")).to_be_visible()
        if view == "rounds":
            page.click("#compare-load")
            expect(page.locator("#compare-chart svg")).to_be_visible()
        page.locator("#view-" + view + " svg .item").first.hover()  # the tooltip too
        checked += page.evaluate(CONTRASTS)
    choose(page, "visits")
    expect(page.locator("#releases svg").first).to_be_visible()
    checked += page.evaluate(CONTRASTS)
    assert len(checked) > 300  # labels, ticks, values, legends, tooltip, tables
    low = [(text, round(ratio, 2)) for text, ratio in checked if ratio < MIN_CONTRAST]
    assert low == [], low
    # graphics a reader tells apart (WCAG 1.4.11: >= 3:1 against the white panel)
    fills = page.evaluate("""() => ['--accent', '--soft-bar', '--good', '--muted', '--bad'].map(
        v => getComputedStyle(document.documentElement).getPropertyValue(v).trim())""")
    assert all(_ratio(colour, "#ffffff") >= 3 for colour in fills), fills


def _ratio(first: str, second: str) -> float:
    def luminance(hex_colour: str) -> float:
        channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    high, low = sorted((luminance(first), luminance(second)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_the_analyst_sees_no_exact_counts(world: World) -> None:
    """What the releases view reads: an analyst's answers, never the trusted metric's counts."""
    answer = requests.post(world.agg.url + "/v1/metrics/visits/estimates", json={},
                           headers={"Authorization": f"Bearer {world.agg.analyst.token}"}, timeout=30)
    assert answer.status_code == 403 and answer.json()["field"] == "metric"
