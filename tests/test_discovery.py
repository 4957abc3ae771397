"""Prefix encoding and unknown-dictionary discovery (docs/decoding.md 8): unit, API and CLI round trips."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from aggsupport import bearer, current_window, database_url, live_server, post_reports

from aggregator.analysis.decoding import BitCounts, fit_candidates
from aggregator.analysis.discovery import (
    DiscoverySettings,
    discover,
    extend,
    fit_prefix_candidates,
    levels_for,
    recall_precision,
    whole_prefixes,
)
from aggregator.cli.main import main
from protocol.encodings import (
    BloomEncoding,
    PrefixEncoding,
    bloom_bits,
    encoding_from_dict,
    prefix_of,
)
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.rng import SeededRandom
from protocol.wire import build_report

PLANTED = {"home": 0.4, "work": 0.25, "gym": 0.15}  # the rest: random 5-letter strings, each rare


def test_prefix_of_cuts_and_marks_complete_values() -> None:
    assert prefix_of("home", 2) == b"ho"
    assert prefix_of("home", 4) == b"home"
    assert prefix_of("home", 9) == b"home\x00"
    with pytest.raises(ParameterError) as err:
        prefix_of("a\x00b", 3)
    assert err.value.field == "value"


def test_prefix_encoding_is_a_bloom_filter_of_the_cohorts_prefix() -> None:
    enc = PrefixEncoding(num_bits=64, num_hashes=2, lengths=(2, 4, 9))
    for cohort, length in enumerate(enc.lengths):
        bits = bloom_bits(prefix_of("homes", length), cohort, num_bits=64, num_hashes=2)
        assert enc.bits_of("homes", cohort) == bits
        assert set(np.nonzero(enc.encode("homes", cohort))[0]) == set(bits)
        assert enc.bit_table(["homes"])[cohort, 0].tolist() == bits
    assert encoding_from_dict(enc.to_dict()) == enc
    params = MetricParams(name="p", encoding=enc, mode="symmetric", level=4.0, value_kind="categorical")
    assert MetricParams.from_dict(params.to_dict()) == params
    # Same guarantee as a Bloom metric with the same hashes: one prefix per report.
    bloom = MetricParams(name="p", encoding=BloomEncoding(num_bits=64, num_hashes=2, num_cohorts=3),
                         mode="symmetric", level=4.0, value_kind="categorical")
    assert params.guarantee() == bloom.guarantee()


@pytest.mark.parametrize(("data", "field"), [
    ({"kind": "prefix", "num_bits": 8, "num_hashes": 1}, "encoding.lengths"),
    ({"kind": "prefix", "num_bits": 8, "num_hashes": 1, "lengths": 3}, "encoding.lengths"),
    ({"kind": "prefix", "num_bits": 8, "num_hashes": 1, "lengths": [0]}, "lengths"),
    ({"kind": "prefix", "num_bits": 8, "num_hashes": 1, "lengths": [2], "x": 1}, "encoding.x"),
    ({"kind": "other"}, "encoding.kind"),
])
def test_bad_prefix_encodings_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ParameterError) as err:
        encoding_from_dict(data)
    assert err.value.field == field


def test_extend_and_levels() -> None:
    assert extend([b"a", b"b\x00"], 2, [b"x", b"\x00"]) == [b"ax", b"a\x00", b"b\x00"]
    assert levels_for(16, 2, 3) == [3, 5, 7, 9, 11, 13, 15, 17]
    assert levels_for(4, 2) == [2, 4, 5]
    assert recall_precision(["a", "x"], ["a", "b"]) == (0.5, 0.5)


def _population(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    names = list(PLANTED) + ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 5)) for _ in range(n)]
    weights = np.array(list(PLANTED.values()) + [(1 - sum(PLANTED.values())) / n] * n)
    return [names[i] for i in rng.choice(len(names), size=n, p=weights)]


def _prefix_metric() -> MetricParams:
    return MetricParams(name="words", encoding=PrefixEncoding(num_bits=1024, num_hashes=1, lengths=(2,) * 3 + (4,) * 3 + (6,) * 3),
                        mode="symmetric", level=6.0, value_kind="categorical", min_batch_size=10)


def _reports(params: MetricParams, values: list[str], seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = SeededRandom(seed)
    cohorts = rng.integers(params.num_cohorts, (len(values),))
    bits = np.stack([params.encode(v, int(c)) for v, c in zip(values, cohorts, strict=True)])
    return params.randomizer().simulate(bits, rng), cohorts


def test_discover_finds_the_planted_strings_and_nothing_else() -> None:
    # 6,000 clients, symmetric level 6 (per-report epsilon 2 x 2.9): planted shares 40/25/15% sit
    # > 10 standard errors (~1.5%) above the 5% reporting share; a 5-letter random string holds
    # ~0.003% and cannot reach 5% except with probability far below 1e-9. Fixed seed: deterministic.
    params = _prefix_metric()
    reports, cohorts = _reports(params, _population(6000, seed=3), seed=4)
    counts = BitCounts.from_reports(reports, cohorts, params.num_cohorts)
    found = discover(counts, params, settings=DiscoverySettings(alphabet="abcdefghijklmnopqrstuvwxyz",
                                                                min_share=0.05))
    assert set(found.strings) == set(PLANTED)
    rows = {r["candidate"]: r for r in found.rows()}
    for word, share in PLANTED.items():
        # the candidate decoder's 99.99% interval (z = 3.9) holds the planted share
        assert abs(rows[word]["proportion"] - share) < 3.9 * rows[word]["std_error"] / found.fit.num_reports + 0.02
    with pytest.raises(ParameterError) as err:
        discover(counts, MetricParams(name="b", encoding=BloomEncoding(num_bits=8, num_hashes=1, num_cohorts=6),
                                      mode="symmetric", level=4.0), settings=None)
    assert err.value.field == "encoding"


# ---------------------------------------------------------------------------
# over HTTP and the CLI
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    folder: Path = tmp_path_factory.mktemp("discovery")
    with database_url("sqlite", folder) as url, live_server(url, folder) as srv:
        admin = srv.admin_token()
        params = _prefix_metric()
        assert srv.register(params, admin).status_code == 201
        reports, cohorts = _reports(params, _population(3000, seed=5), seed=6)
        rng = SeededRandom(7)
        window = current_window(params)
        envelopes = [build_report(params_digest=params.digest(), metric=params.name, round=0, window=window,
                                  cohort=int(c), level=params.level, bits=r, seal_public=srv.keys.seal_public_raw,
                                  report_id=None, ephemeral_private=bytes(rng.integers(256, (32,)).astype(np.uint8)))
                     for r, c in zip(reports, cohorts, strict=True)]
        for start in range(0, len(envelopes), 1000):
            assert post_reports(srv.url, envelopes[start : start + 1000]).status_code == 200
        yield srv.url, srv.analyst_token()


def test_discovered_over_http_and_cli(server: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    url, token = server
    answer = requests.get(f"{url}/v1/metrics/words/discovered", params={"min_share": "0.05",
                          "alphabet": "abcdefghijklmnopqrstuvwxyz"}, headers=bearer(token), timeout=60)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["reason"] is None and body["reports"] == 3000
    assert set(body["discovery"]["discovered"]) == set(PLANTED)  # same margins as above, 3,000 clients: > 7 se
    assert main(["discover", "--server", url, "--token", token, "words", "--min-share", "0.05",
                 "--alphabet", "abcdefghijklmnopqrstuvwxyz", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "string,estimate,std_error,proportion"
    assert {line.split(",")[0] for line in lines[1:]} == set(PLANTED)
    assert main(["discover", "--server", url, "--token", token, "words", "--alphabet", "abcdefghijklmnopqrstuvwxyz",
                 "--json"]) == 0
    assert "discovery" in json.loads(capsys.readouterr().out)


def test_estimates_of_a_prefix_metric_over_http_and_cli(server: tuple[str, str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    url, token = server
    answer = requests.get(f"{url}/v1/metrics/words/estimates", params={"candidates": "home,work,gym"},
                          headers=bearer(token), timeout=60)
    assert answer.status_code == 200, answer.text
    rows = {r["candidate"]: r for r in answer.json()["rows"]}
    for word, share in PLANTED.items():  # 1,000 clients in the length-6 cohorts: 4.5 se + the draw's 0.03
        assert abs(rows[word]["proportion"] - share) < 4.5 * rows[word]["std_error"] / 3000 + 0.03
    for candidates in ("homework", "ab\u0000"):
        refused = requests.get(f"{url}/v1/metrics/words/estimates", params={"candidates": candidates},
                               headers=bearer(token), timeout=30)
        assert refused.status_code == 400 and refused.json()["field"] == "candidates", refused.text
    assert main(["estimates", "--server", url, "--token", token, "words", "--candidates", "home,gym",
                 "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("candidate,estimate,std_error") and {x.split(",")[0] for x in lines[1:]} == {"home", "gym"}
    assert main(["estimates", "--server", url, "--token", token, "words", "--candidates", "homework"]) != 0
    assert "HTTP 400 invalid_parameter (candidates)" in capsys.readouterr().err
    pair = requests.get(f"{url}/v1/metrics/words/association", params={"values_a": "ho", "values_b": "me"},
                        headers=bearer(token), timeout=30)
    assert pair.status_code == 400 and pair.json()["field"] == "metric"


@pytest.mark.parametrize(("query", "field"), [
    ({"min_share": "2"}, "min_share"),
    ({"min_share": "x"}, "min_share"),
    ({"alphabet": "aa"}, "alphabet"),
    ({"max_prefixes": "0"}, "max_prefixes"),
    ({"bogus": "1"}, "bogus"),
    ({"window": "-1"}, "window"),
])
def test_bad_discovery_requests_answer_400_naming_the_field(server: tuple[str, str], query: dict[str, str],
                                                           field: str) -> None:
    url, token = server
    answer = requests.get(f"{url}/v1/metrics/words/discovered", params=query, headers=bearer(token), timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == field


def test_estimates_of_a_prefix_metric_use_the_cohorts_holding_the_candidates_whole() -> None:
    # "home" and "hold" share "ho" (the length-2 cohorts) and "hom"/"hol" differ at length 4; the
    # ordinary decoder over every cohort credits "home" with part of "hold"'s short-prefix reports.
    # 9,000 clients, 3,000 in the length-6 cohorts: the scaled standard error is ~27 reports (0.003).
    # Fixed seeds: deterministic. The ordinary decoder's bias on "home" is +934 reports (+0.10), 35 se.
    rng = np.random.default_rng(8)
    values = list(rng.choice(["home", "hold", "gym", "park"], size=9000, p=[0.4, 0.3, 0.2, 0.1]))
    params = _prefix_metric()
    reports, cohorts = _reports(params, values, seed=9)
    counts = BitCounts.from_reports(reports, cohorts, params.num_cohorts)
    truth = {v: values.count(v) for v in ("home", "gym")}
    fit = fit_prefix_candidates(counts, params, None, ["home", "gym"])
    assert fit.num_reports == 9000
    for name, estimate, se in zip(fit.candidates, fit.estimates, fit.std_errors, strict=True):
        assert abs(estimate - truth[name]) < 4.5 * se, (name, estimate, truth[name], se)  # 4.5 se: < 1e-5 each
    naive = fit_candidates(counts, params, None, ["home", "gym"])
    assert naive.estimates[0] - truth["home"] > 4.5 * fit.std_errors[0]  # the bias the fix removes
    for bad in (["homework"], ["a\x00"]):
        with pytest.raises(ParameterError) as err:
            fit_prefix_candidates(counts, params, None, bad)
        assert err.value.field == "candidates"
    with pytest.raises(ParameterError) as err:
        whole_prefixes(BloomEncoding(num_bits=8, num_hashes=1, num_cohorts=2), ["a"])
    assert err.value.field == "encoding"
