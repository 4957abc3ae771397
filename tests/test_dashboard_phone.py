"""The dashboard on a phone (375 and 480 px wide), and answers that match what is selected.

Runs Debian's Chromium under Playwright against the aggregator of
``test_dashboard``'s scenario (skips, saying why, without a browser). At each
width every view must fit: the page never scrolls sideways (a wide table or
chart scrolls inside its own box). Certificates are offered only for
asymmetric metrics, and a change of window or round clears the answers
about the old selection.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_dashboard import Scenario, launch_chromium, scenario  # noqa: F401  (scenario: the fixture)

from protocol.encodings import DirectEncoding
from protocol.params import MetricParams

PAGE_OVERFLOW = "() => document.documentElement.scrollWidth - window.innerWidth"
# Every shown chart fits its box, and no text of it (legend, label, value) passes the chart's edges:
# the list of what does not, empty when all is well.
CHARTS_CUT = """() => {
  const cut = [];
  for (const box of document.querySelectorAll('.chart')) {
    if (!box.offsetParent) continue;  // in a hidden view
    if (box.scrollWidth > box.clientWidth + 1) cut.push('chart wider than its box: ' + box.id);
    for (const chart of box.querySelectorAll('svg')) {
      const width = chart.width.baseVal.value;
      for (const text of chart.querySelectorAll('text')) {
        const b = text.getBBox();
        if (b.x < -1 || b.x + b.width > width + 1) cut.push(text.textContent);
      }
    }
  }
  return cut;
}"""


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from launch_chromium()


def _open(browser: Any, world: Scenario, width: int) -> Any:
    page = browser.new_page(viewport={"width": width, "height": 800})
    page.goto(world.agg.url + "/dashboard")
    page.fill("#token", world.agg.analyst.token or "")
    page.click("#token-use")
    return page


@pytest.mark.parametrize("width", [375, 480])
def test_every_view_fits_a_phone(browser: Any, scenario: Scenario, width: int) -> None:  # noqa: F811
    from playwright.sync_api import expect

    page = _open(browser, scenario, width)
    expect(page.locator("#metrics-table tbody tr")).to_have_count(3)
    assert page.evaluate(PAGE_OVERFLOW) <= 0
    page.click("#metrics-table button[data-metric='places']")
    expect(page.locator("#estimates-chart svg")).to_be_visible()
    assert page.evaluate(PAGE_OVERFLOW) <= 0, "estimates chart"
    assert page.evaluate(CHARTS_CUT) == [], "estimates chart"
    legend = page.locator("#estimates-chart svg text.legend").all_text_contents()
    assert "detection threshold" in legend and any(t.endswith("% interval") for t in legend), legend
    page.click("#est-as-table")
    expect(page.locator("#estimates-table")).to_be_visible()
    assert page.evaluate(PAGE_OVERFLOW) <= 0, "estimates table"
    page.click("#tab-certificates")
    page.fill("#threshold", "40")
    page.click("#cert-load")
    expect(page.locator("#certificates-result")).to_be_visible()
    assert page.evaluate(PAGE_OVERFLOW) <= 0, "certificates"
    page.click("#tab-rounds")
    expect(page.locator(f".round[data-round='{scenario.round_id}']")).to_be_visible()
    assert page.evaluate(CHARTS_CUT) == [], "participation chart"
    page.select_option("#compare-round", str(scenario.round_id))
    page.click("#compare-load")
    expect(page.locator("#compare-figure")).to_be_visible()
    assert page.evaluate(PAGE_OVERFLOW) <= 0, "rounds"
    assert page.evaluate(CHARTS_CUT) == [], "before/after chart"


def test_certify_only_where_it_applies_and_no_stale_answers(browser: Any, scenario: Scenario) -> None:  # noqa: F811
    from playwright.sync_api import expect

    symmetric = MetricParams(name="apps", encoding=DirectEncoding(domain=("a", "b")), mode="symmetric", level=2.0)
    scenario.agg.admin.post("/v1/metrics", symmetric.to_dict())
    page = _open(browser, scenario, 480)
    page.click("#metrics-table button[data-metric='apps']")
    expect(page.locator("#tab-estimates")).to_be_visible()
    expect(page.locator("#tab-certificates")).to_be_hidden()  # symmetric noise: no one-sided certificate

    page.click("#metrics-table button[data-metric='places']")
    expect(page.locator("#tab-certificates")).to_be_visible()
    expect(page.locator("#estimates-table tbody tr")).to_have_count(len(scenario.domain))
    # counts >= 0: the displayed estimates are clipped, the answer is not
    page.click("#est-as-table")
    page.check("#est-nonneg")
    shown = page.locator("#estimates-table td.estimate").all_inner_texts()
    assert shown and min(float(v) for v in shown) >= 0
    page.uncheck("#est-nonneg")
    page.click("#tab-certificates")
    page.fill("#threshold", "40")
    page.click("#cert-load")
    expect(page.locator("#certificates-result")).to_be_visible()
    page.select_option("#est-round", "0")  # another collection: the certificates above are not about it
    expect(page.locator("#certificates-result")).to_be_hidden()
    expect(page.locator("#certificates-summary")).to_have_text("")
    page.click("#tab-estimates")
    expect(page.locator("#estimates-result")).to_be_hidden()
    expect(page.locator("#estimates-summary")).to_contain_text("selection changed")
