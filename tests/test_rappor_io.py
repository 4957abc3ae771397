"""RAPPOR interop: the reference's params / counts / map (and reports) files, and decode-rappor.

Formats from google/rappor: analysis/R/read_input.R, doc/data-flow.md,
bin/hash_candidates.py, tests/sum_bits.py, tests/gen_counts.R.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest

from aggregator.analysis.decoding import BitCounts, fit_candidates
from aggregator.analysis.decoding.simulation import simulate_counts, true_bits
from aggregator.analysis.rappor_io import (
    RESULT_COLUMNS,
    RapporParams,
    decode_rappor,
    export_rappor,
    read_counts,
    read_map,
    read_params,
    read_reports,
    write_counts,
    write_map,
    write_params,
)
from aggregator.analysis.rappor_sample import (
    SAMPLE_PARAMS,
    RapporSample,
    sample_collection,
    write_sample,
)
from aggregator.cli.commands.decode_rappor import main_decode_rappor
from protocol import BloomEncoding, MetricParams, SeededRandom, bloom_bits
from protocol.errors import ParameterError

DEMO = SAMPLE_PARAMS  # google/rappor tests/params.csv


def test_params_round_trip_and_reference_layout(tmp_path: Path) -> None:
    path = tmp_path / "params.csv"
    write_params(path, DEMO)
    assert path.read_text().splitlines()[0] == "k,h,m,p,q,f"
    assert read_params(path) == DEMO
    # The reference's own file has spaces after the commas.
    path.write_text("k, h, m, p, q, f\n16, 2, 64, 0.1, 0.9, 0.2\n")
    assert read_params(path) == DEMO


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("k,h,m,p,q\n16,2,64,0.1,0.9\n", "params"),
        ("h,k,m,p,q,f\n2,16,64,0.1,0.9,0.2\n", "params"),
        ("k,h,m,p,q,f\n16,2,64,0.1,0.9,0.2\n16,2,64,0.1,0.9,0.2\n", "params"),
        ("k,h,m,p,q,f\n16.5,2,64,0.1,0.9,0.2\n", "params.k"),
        ("k,h,m,p,q,f\n16,2,64,x,0.9,0.2\n", "params.p"),
        ("k,h,m,p,q,f\n16,2,64,0.1,1.9,0.2\n", "q"),
        ("k,h,m,p,q,f\n2,3,64,0.1,0.9,0.2\n", "h"),
    ],
)
def test_bad_params_files_name_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "params.csv"
    path.write_text(text)
    with pytest.raises(ParameterError) as err:
        read_params(path)
    assert err.value.field == field


def test_counts_round_trip_and_column_order(tmp_path: Path) -> None:
    rng = SeededRandom(1)
    ones = rng.integers(50, (64, 16))
    counts = BitCounts(ones=ones, totals=np.full(64, 60))
    path = tmp_path / "counts.csv"
    write_counts(path, counts)
    first = path.read_text().splitlines()[0].split(",")
    assert first == ["60", *[str(v) for v in ones[0]]]  # total first, then bits 0 .. k-1
    back = read_counts(path, DEMO)
    assert np.array_equal(back.ones, counts.ones) and np.array_equal(back.totals, counts.totals)
    # R writes large doubles in exponent form.
    path.write_text("1e+05,2e+04,3\n")
    assert read_counts(path).ones.tolist() == [[20000, 3]]
    with pytest.raises(ParameterError) as err:
        read_counts(path, DEMO)
    assert err.value.field == "counts"


def test_reports_are_summed_most_significant_bit_first(tmp_path: Path) -> None:
    params = RapporParams(k=4, h=1, m=2, p=0.25, q=0.75, f=0.5)
    path = tmp_path / "reports.csv"
    # "0001" is bit 0 (the integer 1), "1000" is bit 3 (the integer 8): RAPPOR's sum_bits.
    path.write_text("client,cohort,irr\nc1,0,0001\nc2,0,1001\nc3,1,1000\n")
    counts = read_reports(path, params)
    assert counts.ones.tolist() == [[2, 0, 0, 1], [0, 0, 0, 1]]
    assert counts.totals.tolist() == [2, 1]
    path.write_text("client,cohort,irr\nc1,0,012\n")
    with pytest.raises(ParameterError):
        read_reports(path, params)


def test_map_indices_follow_hash_candidates(tmp_path: Path) -> None:
    params = RapporParams(k=16, h=2, m=2, p=0.25, q=0.75, f=0.5)
    table = np.array(
        [[bloom_bits("home", c, num_bits=16, num_hashes=2, hashing="rappor-md5")] for c in range(2)]
    )
    path = tmp_path / "map.csv"
    write_map(path, ["home"], table, 16)
    # md5(uint32_be(cohort) || value), byte i mod k, written as cohort * k + bit + 1.
    expected = []
    for cohort in range(2):
        digest = hashlib.md5(struct.pack(">I", cohort) + b"home").digest()
        expected += [cohort * 16 + digest[i] % 16 + 1 for i in range(2)]
    assert path.read_text().strip() == "home," + ",".join(map(str, expected))
    names, back = read_map(path, params)
    assert names == ["home"] and np.array_equal(back, table)


def test_map_round_trip_with_awkward_strings(tmp_path: Path) -> None:
    enc = BloomEncoding(num_bits=32, num_hashes=3, num_cohorts=5, hashing="rappor-md5")
    candidates = ["plain", 'with "quotes"', "comma, inside", "ünïcode", " spaced ", "line\nbreak"]
    table = enc.bit_table(candidates)
    path = tmp_path / "map.csv"
    write_map(path, candidates, table, 32)
    names, back = read_map(path, RapporParams(k=32, h=3, m=5, p=0.5, q=0.75, f=0.5))
    assert names == candidates and np.array_equal(back, table)
    with pytest.raises(ParameterError) as err:
        write_map(path, ["", "x"], enc.bit_table(["", "x"]), 32)
    assert err.value.field == "candidates"


def test_map_reader_follows_the_reference(tmp_path: Path) -> None:
    params = RapporParams(k=4, h=1, m=2, p=0.25, q=0.75, f=0.5)
    path = tmp_path / "map.csv"
    # Empty string -> "Empty"; a repeated string keeps its first row; order within a row is free.
    path.write_text(",1,5\nv1,6,2\nv1,1,5\n")
    names, table = read_map(path, params)
    assert names == ["Empty", "v1"]
    assert table[:, :, 0].tolist() == [[0, 1], [0, 1]]
    path.write_text("v1,1,2\n")  # both indices in cohort 0
    with pytest.raises(ParameterError) as err:
        read_map(path, params)
    assert err.value.field == "map"


def _demo_population(clients: int, seed: int) -> tuple[list[str], np.ndarray, BitCounts]:
    sample = sample_collection(clients, seed)  # DEMO's parameters
    return sample.candidates, sample.truth, sample.counts


def _write_demo(folder: Path, candidates: list[str], counts: BitCounts) -> tuple[Path, Path, Path]:
    paths = write_sample(folder, RapporSample(candidates, np.zeros(len(candidates), dtype=np.int64), counts))
    return paths["params"], paths["counts"], paths["map"]


def test_rappor_data_set_decodes_to_the_truth(tmp_path: Path) -> None:
    candidates, truth, counts = _demo_population(200_000, seed=31)
    rows = decode_rappor(*_write_demo(tmp_path, candidates, counts))
    found = {r["string"]: r for r in rows}
    true_of = dict(zip(candidates, truth, strict=True))
    # The 10 largest values (z > 10 each at these sizes) are all detected.
    assert {f"v{i}" for i in range(1, 11)} <= set(found)
    # Bonferroni (OLS regime): P(>= 2 false detections) <= E[false] / 2 <= 0.025.
    assert sum(true_of[s] == 0 for s in found) <= 1
    for s, r in found.items():
        if true_of[s] > 0:
            # 4.5 standard errors (+1 for the flooring): <= 20 detected, false failure < 20 * 6.8e-6.
            assert abs(r["estimate"] - true_of[s]) <= 4.5 * r["std_error"] + 1
        assert r["proportion"] == pytest.approx(r["estimate"] / counts.num_reports)
        assert r["prop_low_95"] == pytest.approx(
            max(r["proportion"] - 1.96 * r["prop_std_error"], 0.0)
        )
        assert r["prop_high_95"] == pytest.approx(
            min(r["proportion"] + 1.96 * r["prop_std_error"], 1.0)
        )
    estimates = [r["estimate"] for r in rows]
    assert estimates == sorted(estimates, reverse=True)
    assert all(isinstance(r["estimate"], int) and isinstance(r["std_error"], int) for r in rows)


def test_cli_prints_reference_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    candidates, _, counts = _demo_population(100_000, seed=5)
    params_path, counts_path, map_path = _write_demo(tmp_path, candidates, counts)
    argv = ["--params", str(params_path), "--counts", str(counts_path), "--map", str(map_path)]
    assert main_decode_rappor(argv) == 0
    out = capsys.readouterr().out
    parsed = list(csv.reader(out.splitlines()))
    assert tuple(parsed[0]) == RESULT_COLUMNS
    direct = decode_rappor(params_path, counts_path, map_path)
    assert [row[0] for row in parsed[1:]] == [r["string"] for r in direct]
    assert [int(row[1]) for row in parsed[1:]] == [r["estimate"] for r in direct]
    assert main_decode_rappor([*argv[:4], "--map", str(tmp_path / "missing.csv")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'missing.csv'}: No such file")  # not [Errno 2]
    assert main_decode_rappor(["--params", "x"]) == 2


def test_our_metrics_export_with_the_same_probabilities(tmp_path: Path) -> None:
    enc = BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4)
    asym = MetricParams(name="a", encoding=enc, mode="asymmetric", level=2.0, irr_q=0.1)
    sym = MetricParams(name="s", encoding=enc, mode="symmetric", level=1.2, irr_p=0.3, irr_q=0.8)
    plain = MetricParams(name="s", encoding=enc, mode="symmetric", level=1.2)
    for params in (asym, sym, plain):
        rappor = RapporParams.from_metric_params(params)
        assert rappor.probabilities() == pytest.approx(
            params.randomizer().probabilities(), abs=1e-15
        )
    assert RapporParams.from_metric_params(asym).f == 0.0
    # An asymmetric data set of ours, exported, decodes like ours.
    candidates = [f"c{i}" for i in range(30)]
    items = np.repeat(np.arange(6), [4000, 3000, 2000, 2000, 1000, 500])
    rng = SeededRandom(8)
    cohorts = rng.integers(4, items.size)
    counts = simulate_counts(
        asym, None, true_bits(asym, items, cohorts, enc.bit_table(candidates)), cohorts, rng
    )
    paths = export_rappor(tmp_path, counts, asym, None, candidates, prefix="ours_")
    rows = decode_rappor(paths["params"], paths["counts"], paths["map"])
    ours = fit_candidates(counts, asym, None, candidates)
    assert [r["string"] for r in rows] == [r["candidate"] for r in ours.rows(detected_only=True)]
    assert [r["estimate"] for r in rows] == [
        math.floor(r["estimate"]) for r in ours.rows(detected_only=True)
    ]


def test_rappor_params_map_to_our_randomizer() -> None:
    params = DEMO.to_metric_params()
    assert params.encoding.hashing == "rappor-md5"  # type: ignore[union-attr]
    assert params.randomizer().f == pytest.approx(0.2)
    assert params.randomizer().probabilities() == pytest.approx(DEMO.probabilities())
    with pytest.raises(ParameterError) as err:
        RapporParams(k=16, h=2, m=64, p=0.225, q=0.775, f=0.0).to_metric_params()
    assert err.value.field == "f"


def test_f_zero_files_decode(tmp_path: Path) -> None:
    # RAPPOR's "eps_1_5" setting has no PRR (f = 0): only the probabilities matter.
    rappor = RapporParams(k=16, h=2, m=8, p=0.225, q=0.775, f=0.0)
    assert rappor.probabilities() == (0.225, 0.775)
    enc = BloomEncoding(num_bits=16, num_hashes=2, num_cohorts=8, hashing="rappor-md5")
    candidates = ["a", "b", "c", "d"]
    table = enc.bit_table(candidates)
    rng = SeededRandom(4)
    cohorts = rng.integers(8, 40_000)
    items = np.repeat([0, 1, -1], [20_000, 10_000, 10_000])
    truth = true_bits(
        MetricParams(name="x", encoding=enc, mode="trusted", level=math.inf), items, cohorts, table
    )
    reports = np.where(truth, rng.uniform(truth.shape) < 0.775, rng.uniform(truth.shape) < 0.225)
    write_params(tmp_path / "p.csv", rappor)
    write_counts(tmp_path / "c.csv", BitCounts.from_reports(reports, cohorts, 8))
    write_map(tmp_path / "m.csv", candidates, table, 16)
    rows = {
        r["string"]: r
        for r in decode_rappor(tmp_path / "p.csv", tmp_path / "c.csv", tmp_path / "m.csv")
    }
    assert {"a", "b"} <= set(rows)  # z > 40 for both
    assert abs(rows["a"]["estimate"] - 20_000) <= 4.5 * rows["a"]["std_error"] + 1


def test_the_sample_data_set_is_written_where_asked_and_decodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--write-sample makes the folder, says how to decode it, and the printed command decodes it."""
    folder = tmp_path / "new" / "sample"
    assert main_decode_rappor(["--write-sample", str(folder)]) == 0
    command = capsys.readouterr().out.splitlines()[-1].split()
    assert command[:2] == ["onesided", "decode-rappor"]
    assert main_decode_rappor([*command[2:], "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    truth = dict(line.split(",") for line in (folder / "truth.csv").read_text().splitlines()[1:])
    # v1 has 27,795 reports (z > 100 at these sizes): detected, within 5 standard errors (false failure < 1e-6).
    top = rows[0]
    assert top["string"] == "v1" and abs(top["estimate"] - int(truth["v1"])) <= 5 * top["std_error"] + 1

