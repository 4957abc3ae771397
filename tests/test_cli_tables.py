"""The command line for people: tables by default, ``--json`` for scripts, ISO-8601 times, privacy printed.

One live aggregator (werkzeug in a thread, SQLite) serves a direct
asymmetric metric with planted reports and a pair metric; the commands run
in this process through ``main``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from aggsupport import live_server, make_reports, post_reports

from aggregator.api_client import ApiClient
from aggregator.cli.main import main
from aggregator.cli.render import iso_time
from client_sdk.ledger import window_cost
from protocol.encodings import DirectEncoding
from protocol.params import MetricParams

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
PLACES = MetricParams(name="places", encoding=DirectEncoding(domain=tuple("abcdef")), mode="asymmetric", level=2.0,
                      time_precision=3600, min_batch_size=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    folder = tmp_path_factory.mktemp("agg")
    with live_server(f"sqlite:///{folder}/a.db", folder) as srv:
        admin, analyst = srv.admin_token(), srv.analyst_token()
        ApiClient(srv.url, admin).post("/v1/metrics", PLACES.to_dict())
        post_reports(srv.url, make_reports(PLACES, srv.keys.seal_public_raw, 200, seed=3).envelopes)
        yield {"url": srv.url, "admin": admin, "analyst": analyst}


def run(capsys: pytest.CaptureFixture[str], server: dict[str, str], *argv: str, role: str = "analyst") -> str:
    code = main([*argv, "--server", server["url"], "--token", server[role]])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and re.fullmatch(r"onesided \S+\n", capsys.readouterr().out)


def test_every_argument_has_help() -> None:
    """Every flag and every positional argument of every command and action says what it is."""
    import argparse

    from aggregator.cli.main import build_parser

    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:  # argparse keeps its actions here; no public listing
            if isinstance(action, argparse._SubParsersAction):  # the command word itself: each choice has help
                for name, sub in action._name_parser_map.items():
                    walk(sub, f"{path} {name}")
            elif not action.help:
                missing.append(f"{path} {action.option_strings[0] if action.option_strings else action.dest}")

    walk(build_parser(), "onesided")
    assert missing == []


def test_metric_list_and_show_are_tables_with_iso_times(capsys: pytest.CaptureFixture[str],
                                                        server: dict[str, str]) -> None:
    listed = run(capsys, server, "metric", "list")
    header, row = listed.splitlines()[:2]
    assert header.split() == ["name", "encoding", "mode", "level", "window_s", "reports", "created_at"]
    assert row.split()[:6] == ["places", "direct", "asymmetric", "2", "3,600", "200"] and ISO.search(row)
    as_json = json.loads(run(capsys, server, "metric", "list", "--json"))
    assert iso_time(as_json["metrics"][0]["created_at"]) in row
    shown = run(capsys, server, "metric", "show", "places")
    assert re.search(r"^params\.encoding\.kind +direct$", shown, re.M) and "epsilon per report" in shown
    assert "collections:" in shown


def test_metric_create_prints_the_privacy_of_its_level(capsys: pytest.CaptureFixture[str],
                                                       server: dict[str, str]) -> None:
    flags = ["metric", "create", "--name", "os-country", "--encoding", "direct", "--pair-a", "ios,android",
             "--pair-b", "de,fr,us", "--mode", "asymmetric", "--level", "1.5", "--round-to", "3"]
    out = run(capsys, server, *flags, role="admin")
    params = MetricParams.from_dict(ApiClient(server["url"], server["analyst"]).get("/v1/metrics/os-country")["params"])
    assert params.encoding.domain == ("ios\x1fde", "ios\x1ffr", "ios\x1fus", "android\x1fde", "android\x1ffr",
                                      "android\x1fus")
    g = params.guarantee()
    assert f"epsilon per report   {g.epsilon_per_report:g}" in out
    assert f"at most, per window  {g.epsilon_longitudinal:g}" in out
    assert f"costs {window_cost(params, [1.5, 3.0])[0]:g} in all" in out
    assert re.search(r"^outcome +created$", out, re.M)
    dry = json.loads(run(capsys, server, *flags[:-2], "--dry-run", "--json"))
    assert dry["privacy"]["rounds"][0]["level_to"] == 3.0  # default: twice the level
    assert dry["privacy"]["epsilon_per_window_any_reports"] == g.epsilon_longitudinal


def test_prefix_metric_from_flags(capsys: pytest.CaptureFixture[str], server: dict[str, str]) -> None:
    out = run(capsys, server, "metric", "create", "--name", "words", "--encoding", "prefix", "--num-bits", "64",
              "--num-hashes", "2", "--prefix-lengths", "1,2,3,4", "--mode", "symmetric", "--level", "2",
              "--dry-run", "--json")
    assert json.loads(out)["params"]["encoding"] == {"kind": "prefix", "num_bits": 64, "num_hashes": 2,
                                                     "lengths": [1, 2, 3, 4]}
    assert main(["metric", "create", "--name", "w", "--encoding", "prefix", "--num-bits", "64", "--num-hashes",
                 "2", "--mode", "symmetric", "--level", "2", "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("error: --prefix-lengths:")
    assert main(["metric", "create", "--name", "w", "--encoding", "direct", "--pair-a", "x", "--mode",
                 "symmetric", "--level", "2", "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("error: --pair-b is required here")


def test_rounds_list_status_and_close(capsys: pytest.CaptureFixture[str], server: dict[str, str]) -> None:
    assert "no rounds of 'places' yet" in run(capsys, server, "round", "list", "places")
    opened = run(capsys, server, "round", "open", "places", "--level-to", "4", role="admin")
    assert re.search(r"^level_to +4$", opened, re.M) and re.search(r"^opened_at +" + ISO.pattern, opened, re.M)
    listed = run(capsys, server, "round", "list", "places").splitlines()
    assert listed[0].split()[:5] == ["id", "level_from", "level_to", "open", "reports"]
    round_id = listed[1].split()[0]
    assert listed[1].split()[1:4] == ["2", "4", "yes"]
    assert "participation:" in run(capsys, server, "round", "status", round_id)
    closed = json.loads(run(capsys, server, "round", "close", round_id, "--json", role="admin"))
    assert closed["open"] is False
    assert run(capsys, server, "round", "list", "places").splitlines()[1].split()[3] == "no"


def test_estimates_table_notes_negative_estimates_and_clips_on_request(
    capsys: pytest.CaptureFixture[str], server: dict[str, str]
) -> None:
    answer = json.loads(run(capsys, server, "estimates", "places", "--round", "0", "--json"))
    negative = sum(r["estimate"] < 0 for r in answer["rows"])
    table = run(capsys, server, "estimates", "places", "--round", "0")
    lines = table.splitlines()
    assert lines[0].startswith("places, window ") and ISO.search(lines[0]) and "200 reports" in lines[0]
    assert lines[1].split() == ["candidate", "estimate", "std_error", "lower", "upper", "p_value", "detected"]
    # the random bits are Bernoulli(0.3) for every place, so estimates scatter around a common value;
    # whether some are negative depends on the seed, and the note follows what the answer holds
    assert (f"note: {negative} estimates are negative" in table) == (negative > 0)
    clipped = run(capsys, server, "estimates", "places", "--round", "0", "--nonnegative")
    values = [float(line.split()[1].replace(",", "")) for line in clipped.splitlines()[2:2 + len(answer["rows"])]]
    assert min(values) >= 0 and "are negative" not in clipped
    csv_text = run(capsys, server, "estimates", "places", "--round", "0", "--format", "csv")
    first = csv_text.splitlines()[1].split(",")
    assert all(len(re.sub(r"[-.]|e.*", "", x).lstrip("0")) <= 6 for x in first[1:7] if x)  # 6 significant digits


def test_certify_table(capsys: pytest.CaptureFixture[str], server: dict[str, str]) -> None:
    out = run(capsys, server, "certify", "places", "--round", "0", "--threshold", "1000", "--alpha", "0")
    assert out.splitlines()[1].split() == ["candidate", "upper_bound", "verdict"]
    assert "6 of 6 safe: count <= 1000" in out


def test_association_on_a_metric_that_is_not_a_pair_metric(capsys: pytest.CaptureFixture[str],
                                                            server: dict[str, str]) -> None:
    code = main(["association", "places", "--values-a", "a", "--values-b", "b", "--server", server["url"],
                 "--token", server["analyst"]])
    err = capsys.readouterr().err
    assert code == 2 and "is not a pair metric" in err and "--pair-a" in err


def test_help_and_command_list_stay_light(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import sys; import aggregator.cli.main as m; m.build_parser(); "
            "print(sorted(n for n in ('aggregator.cli.render', 'json', 'importlib.metadata') if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "aggregator.cli.render" not in out.stdout and "importlib.metadata" not in out.stdout


def test_a_round_status_shows_its_decoding_for_people() -> None:
    """No raw JSON, no 16-digit floats, windows as ISO-8601 UTC times (not counts with commas)."""
    from aggregator.cli.commands.rounds import round_text

    body = {"id": 1, "metric": "places", "level_from": 1.0, "level_to": 8.0, "opened_at": 1795737600,
            "decoding": {"windows": [1795737600], "reports": 18992,
                         "top": [{"candidate": "place-0000", "estimate": 7810.123456789012,
                                  "std_error": 14.045678901234567, "detected": True}]}}
    text = round_text(body)
    assert "decoding.windows  2026-11-27T00:00:00Z" in text and "1,795,737,600" not in text
    assert "{" not in text and "7810.12" not in text and "14.0456" not in text
    assert "place-0000" in text.split("decoding.top:\n")[1] and "7,810" in text and "14.05" in text


def test_epsilon_per_window_means_what_the_ledger_charges(capsys: pytest.CaptureFixture[str]) -> None:
    """One meaning per label: metric create's 'epsilon per window' is the client ledger's epsilon_per_window
    (a window's cost, IRR included); the bound for any number of reports has its own label."""
    flags = ["metric", "create", "--name", "s", "--mode", "symmetric", "--encoding", "direct", "--domain", "a,b,c",
             "--level", "1", "--irr-p", "0.25", "--irr-q", "0.75", "--dry-run"]
    assert main([*flags, "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    privacy, params = dry["privacy"], MetricParams.from_dict(dry["params"])
    assert privacy["epsilon_per_window"] == window_cost(params, [1.0])[0]  # what Client.ledger() prints
    assert privacy["epsilon_per_window_any_reports"] == params.guarantee().epsilon_longitudinal
    assert privacy["epsilon_per_window"] < privacy["epsilon_per_window_any_reports"]
    assert main(flags) == 0
    out = capsys.readouterr().out
    assert f"epsilon per window   {privacy['epsilon_per_window']:g}  (what a client's ledger charges" in out



def test_metric_create_prints_each_epsilon_rounded_up_never_below_the_ledger_charge() -> None:
    """The SDK's ledger charges 0.899668 where `:g` printed 0.899667: a printed charge is never below it."""
    from aggregator.cli.commands.metrics import privacy_summary, privacy_text
    from protocol.encodings import DirectEncoding
    from protocol.params import MetricParams

    checked = 0
    for level in (0.3, 0.7, 1.1, 1.9, 2.3, 3.7):
        params = MetricParams(name="m", encoding=DirectEncoding(domain=("a", "b", "c")), mode="symmetric",
                              level=level, time_precision=3600)
        summary = privacy_summary(params, [level * 2])
        text = privacy_text("m", summary)
        printed = {line.split()[2]: float(line.split()[3]) for line in text.splitlines()
                   if line.startswith("  epsilon per")}
        assert printed["report"] >= summary["epsilon_per_report"]
        assert printed["window"] >= summary["epsilon_per_window"]
        checked += printed["window"] > float(f"{summary['epsilon_per_window']:g}")
    assert checked  # at least one level where rounding to nearest printed less than the charge
