"""decode-rappor on RAPPOR's association inputs (bin/decode-assoc): formats, accuracy, bad input.

The files are written here in RAPPOR's formats (google/rappor bin/test.sh write-assoc-testdata,
tests/rappor_sim.py --assoc-testdata, bin/decode_assoc.R): a schema ``metric, var, var_type, params``,
``<params>.csv`` in a params folder, a map per string variable, and reports
``client,cohort,<var1>,<var2>`` with bit strings most significant bit first (a boolean is one bit).
The reports come from our encoder and randomizer with RAPPOR's md5 hashing, so the truth is known.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from aggregator.analysis.rappor_io import (
    OTHER,
    RapporParams,
    decode_rappor_association,
    write_map,
    write_params,
)
from aggregator.cli.commands.decode_rappor import main_decode_rappor
from aggregator.cli.main import main
from protocol.encodings import BloomEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.rng import SeededRandom

RAPPOR = RapporParams(k=32, h=2, m=16, p=0.25, q=0.75, f=0.5)
DOMAINS = ("google.com", "yahoo.com", "bing.com", 'q"q')  # a candidate with a quote, as RAPPOR's test has
# (domain, HTTPS flag, share); duck.com is not in the map: it is RAPPOR's "Other".
CELLS = (("google.com", True, 0.32), ("google.com", False, 0.08), ("yahoo.com", True, 0.10),
         ("yahoo.com", False, 0.10), ("bing.com", True, 0.15), ("bing.com", False, 0.05),
         ("duck.com", True, 0.10), ("duck.com", False, 0.10))


def _bit_string(bits: np.ndarray) -> str:
    return "".join("1" if b else "0" for b in bits[::-1])  # bit 0 last: RAPPOR prints MSB first


def write_assoc_inputs(folder: Path, n: int, seed: int, rappor: RapporParams = RAPPOR) -> np.ndarray:
    """RAPPOR's decode-assoc inputs for ``n`` simulated clients; returns the population's joint (domains+Other, flag)."""
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(CELLS), size=n, p=[c[2] for c in CELLS])
    params = rappor.to_metric_params()
    source = SeededRandom(seed + 1)
    cohorts = source.integers(rappor.m, (n,))
    irr = params.randomizer().simulate(
        np.stack([params.encode(CELLS[i][0], int(c)) for i, c in zip(pick, cohorts, strict=True)]), source)
    flag = params.randomizer().simulate(np.array([[CELLS[i][1]] for i in pick]), source)  # one bit, same p, q, f
    with open(folder / "reports.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["client", "cohort", "domain", "flag..HTTPS"])
        for r in range(n):
            writer.writerow([f"c{r}", int(cohorts[r]), _bit_string(irr[r]), _bit_string(flag[r])])
    (folder / "rappor-vars.csv").write_text(
        "metric, var, var_type, params\nm,domain,string,m_params\nm,flag..HTTPS,boolean,m_params\n")
    write_params(folder / "m_params.csv", rappor)
    write_map(folder / "domain_map.csv", DOMAINS, params.encoding.bit_table(list(DOMAINS)), rappor.k)
    names = (*DOMAINS, OTHER)
    joint = np.zeros((len(names), 2))
    for i in pick:
        domain, https, _ = CELLS[i]
        joint[names.index(domain) if domain in names else len(DOMAINS), 0 if https else 1] += 1
    return joint / n


def _options(folder: Path, *extra: str) -> list[str]:
    return ["--metric-name", "m", "--schema", str(folder / "rappor-vars.csv"), "--reports",
            str(folder / "reports.csv"), "--params-dir", str(folder), "--var1", "domain", "--var2", "flag..HTTPS",
            "--map1", str(folder / "domain_map.csv"), "--create-bool-map", *extra]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    folder = tmp_path_factory.mktemp("assoc")
    return folder, write_assoc_inputs(folder, 20_000, seed=7)


def test_the_joint_of_a_simulated_rappor_data_set(inputs: tuple[Path, np.ndarray]) -> None:
    # 20,000 reports, k=32 h=2 m=16, p=.25 q=.75 f=.5 (p* .375, q* .625): every cell's standard error
    # is 0.016-0.021. Each of the 10 cells within 4.5 standard errors of the population's share (the
    # estimator's own error; false failure < 10 x 6.8e-6 if the standard errors are right: measured
    # |z| <= 0.76 here, fixed seeds) and TV < 0.06 (measured 0.028); the EM converged (30 EM steps).
    folder, truth = inputs
    result = decode_rappor_association(
        reports=folder / "reports.csv", schema=folder / "rappor-vars.csv", params_dir=folder, metric_name="m",
        var1="domain", var2="flag..HTTPS", map1=folder / "domain_map.csv")
    assert result.values == ((*DOMAINS, OTHER), ("TRUE", "FALSE"))
    assert result.num_reports == 20_000 and result.removed == 0
    joint, se = result.em.joint, result.em.std_errors
    assert joint.sum() == pytest.approx(1.0) and np.all(joint >= 0)
    assert np.all((se > 0.005) & (se < 0.03))
    assert np.all(np.abs(joint - truth) < 4.5 * se), np.round((joint - truth) / se, 1)
    assert 0.5 * np.abs(joint - truth).sum() < 0.06
    assert result.em.converged
    rows = result.rows()
    assert rows[0]["domain"] == "google.com" and rows[0]["flag..HTTPS"] == "TRUE"
    assert rows[0]["estimate"] == pytest.approx(joint[0, 0] * 20_000)
    assert rows[0]["prop_low_95"] == pytest.approx(max(joint[0, 0] - 1.96 * se[0, 0], 0.0))


def test_without_other_the_unknown_strings_land_on_the_candidates(inputs: tuple[Path, np.ndarray]) -> None:
    # --ignore-other (RAPPOR's ignore_other): duck.com's 20% has nowhere else to go; the joint is
    # over the map's strings only, and the candidates' total rises well above their true 80% (measured
    # 96%).
    folder, truth = inputs
    result = decode_rappor_association(
        reports=folder / "reports.csv", schema=folder / "rappor-vars.csv", params_dir=folder, metric_name="m",
        var1="domain", var2="flag..HTTPS", map1=folder / "domain_map.csv", ignore_other=True)
    assert result.values[0] == DOMAINS
    assert result.em.joint.sum() == pytest.approx(1.0)
    assert result.em.joint[:3].sum() - truth[:3].sum() > 0.1  # 0.2 expected; the se of the sum is ~0.03


def test_cli_prints_every_pair_and_writes_rappors_output_files(
    inputs: tuple[Path, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = inputs
    assert main(["decode-rappor", *_options(folder, "--output-dir", str(tmp_path))]) == 0
    lines = list(csv.reader(capsys.readouterr().out.splitlines()))
    assert lines[0] == ["domain", "flag..HTTPS", "estimate", "std_error", "proportion", "prop_std_error",
                        "prop_low_95", "prop_high_95"]
    assert len(lines) == 1 + 5 * 2 and lines[8][:2] == ['q"q', "FALSE"]
    assert sum(float(row[4]) for row in lines[1:]) == pytest.approx(1.0)
    assert list(csv.reader((tmp_path / "assoc-results.csv").read_text().splitlines())) == lines
    metrics = json.loads((tmp_path / "assoc-metrics.json").read_text())
    assert metrics["num_reports"] == 20_000 and metrics["estimate_dimensions"] == [5, 2]
    assert metrics["em_converged"] is True and 1 <= metrics["num_em_iters"] < 1000 and metrics["em_gap"] <= 1e-3
    assert metrics["num_newton_steps"] >= 0
    # A capped EM says so on stderr.
    assert main_decode_rappor(_options(folder, "--max-em-iters", "3")) == 0
    assert "the EM stopped after 3 steps" in capsys.readouterr().err


def _write(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(text, encoding="utf-8")


def _tiny(folder: Path, reports: str, schema: str | None = None) -> None:
    """A hand-written data set: k=4 bits, m=2 cohorts, one candidate string."""
    _write(folder, "rappor-vars.csv", schema or "metric,var,var_type,params\nm,domain,string,m_params\n"
           "m,flag..HTTPS,boolean,m_params\n")
    write_params(folder / "m_params.csv", RapporParams(k=4, h=1, m=2, p=0.25, q=0.75, f=0.5))
    _write(folder, "domain_map.csv", "a.com,1,5\nb.com,2,7\n")
    _write(folder, "reports.csv", reports)


GOOD = "client,cohort,domain,flag..HTTPS\nc0,0,0001,1\nc1,1,0100,0\nc2,1,0010,1\n"


@pytest.mark.parametrize(("reports", "schema", "expected"), [
    (GOOD.replace("flag..HTTPS\n", "flag\n"), None, "line 1: the header needs a column 'flag..HTTPS'"),
    (GOOD.replace("0100", "01x0"), None, "line 3, column 3 (domain): must be 4 characters of 0 and 1, got '01x0'"),
    (GOOD.replace("0010,1", "0010,2"), None, "line 4, column 4 (flag..HTTPS): must be 1 characters"),
    (GOOD.replace("c1,1,", "c1,2,"), None, "line 3, column 2 (cohort): must be an integer in [0, m = 2)"),
    (GOOD.replace("c1,1,0100,0", "c1,1,,0"), None, "line 3, column 3 (domain)"),
    (GOOD.replace("c1,1,0100,0", "c1,1,0100"), None, "line 3: needs 4 columns like the header, got 3"),
    ("client,cohort,domain,flag..HTTPS\n", None, "no report to decode"),
    (GOOD, "metric,var,params\n", "line 1: the header needs the columns metric, var, var_type, params"),
    (GOOD, "metric,var,var_type,params\nm,domain,string,m_params\nm,flag..HTTPS,bool,m_params\n",
     "line 3, column 3 (var_type): must be one of string, boolean, got 'bool'"),
    (GOOD, "metric,var,var_type,params\nm,domain,string,m_params\n", "no row for metric 'm', var 'flag..HTTPS'"),
])
def test_bad_inputs_name_the_file_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reports: str, schema: str | None, expected: str
) -> None:
    _tiny(tmp_path, reports, schema)
    assert main_decode_rappor(_options(tmp_path, "--output-dir", str(tmp_path))) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err, err
    assert str(tmp_path) in err
    assert not (tmp_path / "assoc-results.csv").exists()


def test_bad_rows_are_removed_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _tiny(tmp_path, GOOD + "c3,0,,1\nc4,0,1000,\n")
    assert main_decode_rappor(_options(tmp_path)) == 2
    assert "--remove-bad-rows" in capsys.readouterr().err
    assert main_decode_rappor(_options(tmp_path, "--remove-bad-rows")) == 0
    captured = capsys.readouterr()
    assert "removed 2 rows" in captured.err and len(captured.out.splitlines()) == 1 + 3 * 2


def test_bad_em_options_are_named_and_a_new_output_folder_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tiny(tmp_path, GOOD)
    for extra, field in ((["--max-em-iters", "0"], "max_em_iters"), (["--em-tolerance", "0"], "em_tolerance")):
        assert main_decode_rappor(_options(tmp_path, *extra)) == 2
        assert capsys.readouterr().err.startswith(f"error: {field} ")
    folder = tmp_path / "new" / "results"
    assert main_decode_rappor(_options(tmp_path, "--output-dir", str(folder))) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["assoc-metrics.json", "assoc-results.csv"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--params", "p.csv", "--reports", "r.csv"], "not both"),
    (["--reports", "r.csv", "--var1", "x"], "missing --schema, --params-dir, --metric-name, --var2"),
])
def test_option_groups(argv: Sequence[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main_decode_rappor(argv) == 2
    assert message in capsys.readouterr().err


def test_string_variables_need_their_map_and_same_cohorts(tmp_path: Path) -> None:
    _tiny(tmp_path, GOOD)
    common = dict(reports=tmp_path / "reports.csv", schema=tmp_path / "rappor-vars.csv", params_dir=tmp_path,
                  metric_name="m", var1="domain", var2="flag..HTTPS")
    with pytest.raises(ParameterError) as err:
        decode_rappor_association(**common)  # type: ignore[arg-type]
    assert err.value.field == "map1"
    write_params(tmp_path / "other.csv", RapporParams(k=4, h=1, m=3, p=0.25, q=0.75, f=0.5))
    _write(tmp_path, "rappor-vars.csv", "metric,var,var_type,params\nm,domain,string,m_params\n"
           "m,flag..HTTPS,boolean,other\n")
    with pytest.raises(ParameterError) as err:
        decode_rappor_association(**common, map1=tmp_path / "domain_map.csv")  # type: ignore[arg-type]
    assert err.value.field == "schema" and "same m" in err.value.detail


def test_two_string_variables(tmp_path: Path) -> None:
    # RAPPOR's decode-assoc takes a string and a boolean; its association.R takes any two, and so do
    # we: two maps, one params file each (same m). 8,000 reports, k=16 h=2 m=4, f=0 (p* .25, q* .75):
    # every cell's standard error is 0.006-0.008 (measured); each within 4.5 of them of the
    # population's share (false failure < 6 x 6.8e-6 if they are right; fixed seeds).
    os_values, countries = ("android", "ios"), ("de", "fr", "jp")
    joint = np.array([[0.30, 0.15, 0.05], [0.10, 0.10, 0.30]])
    rappor = RapporParams(k=16, h=2, m=4, p=0.25, q=0.75, f=0.0)
    params = MetricParams(name="s", encoding=BloomEncoding(num_bits=16, num_hashes=2, num_cohorts=4,
                                                           hashing="rappor-md5"),
                          mode="symmetric", level=4.0, irr_p=0.25, irr_q=0.75)
    rng = np.random.default_rng(17)
    n = 8000
    cells = rng.choice(6, size=n, p=joint.ravel())
    source = SeededRandom(18)
    cohorts = source.integers(4, (n,))
    sent = []
    for values, pick in ((os_values, cells // 3), (countries, cells % 3)):
        truth = np.stack([params.encode(values[i], int(c)) for i, c in zip(pick, cohorts, strict=True)])
        sent.append(np.where(truth, source.uniform(truth.shape) < 0.75, source.uniform(truth.shape) < 0.25))
    with open(tmp_path / "reports.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["client", "cohort", "os", "country"])
        for r in range(n):
            writer.writerow([f"c{r}", int(cohorts[r]), _bit_string(sent[0][r]), _bit_string(sent[1][r])])
    _write(tmp_path, "vars.csv", "metric,var,var_type,params\nm,os,string,p1\nm,country,string,p2\n")
    write_params(tmp_path / "p1.csv", rappor)
    write_params(tmp_path / "p2.csv", rappor)
    for name, values in (("os", os_values), ("country", countries)):
        write_map(tmp_path / f"{name}.csv", values, params.encoding.bit_table(list(values)), 16)
    result = decode_rappor_association(
        reports=tmp_path / "reports.csv", schema=tmp_path / "vars.csv", params_dir=tmp_path, metric_name="m",
        var1="os", var2="country", map1=tmp_path / "os.csv", map2=tmp_path / "country.csv", ignore_other=True)
    assert result.values == (os_values, countries) and result.em.converged
    shares = np.bincount(cells, minlength=6).reshape(2, 3) / n
    assert np.all(np.abs(result.em.joint - shares) < 4.5 * result.em.std_errors)
    assert np.all(result.em.std_errors < 0.015)
