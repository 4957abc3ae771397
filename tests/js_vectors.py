"""Vectors that pin the TypeScript client (``client-js/``) to the Python reference, byte for byte.

Written by the Python code of ``protocol/`` and ``client_sdk/`` and read by client-js's unit
tests. Three files under ``tests/vectors/``:

* ``reports.json``: every kind of report a client makes (a window's first report, and a round's
  re-send: fresh or relaxed IRR, in level rounds and IRR-only rounds), in every mode, with the
  randomness each one drew written down (the IRR's uniforms, the relaxed step's bytes), so a port
  replays it and must produce the same payload bytes.
* ``charges.json``: what the Python ledger charges one window for a chain of reports
  (``client_sdk.ledger.window_cost``), to the micro-epsilon.
* ``ledger.json``: sequences of a client's ledger operations (a report in a new window, a round's
  relaxation, lifetime and renewing ceilings) with what the Python ledger allows, refuses and spends.
* ``configs.json``: signed configs (canonical JSON with floats, a round, a signing-key rotation)
  and documents that must be refused.
* ``answers.json``: upload answers of every wire version as the aggregator writes them (1: the
  results; 2: clock answers with ``retry_after`` and ``server_time``; 3: the ``clipped`` count),
  what a client reads from each, and malformed answers both clients refuse, naming the same field.

``python -m tests.js_vectors`` rewrites the files; ``tests/test_client_js_vectors.py`` fails when
the committed files differ from what this module generates.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from client_sdk.ledger import MetricRecord, WindowRelease, check_new_window, check_relaxation
from client_sdk.memo import ReportPlan, irr_masks, noise_key
from protocol.chain import RoundRepeats, RoundStep, distinct_levels, window_cost
from protocol.crypto import public_key_info, sign_document
from protocol.encodings import canonical_value
from protocol.errors import BudgetExceeded, TighteningRefused
from protocol.params import MetricParams
from protocol.randomizers import Randomizer
from protocol.rng import RandomSource, SeededRandom, Shape
from protocol.rounding import to_micro
from protocol.wire import (
    MAX_RETRY_AFTER,
    PAYLOAD_HEADER,
    MetricEntry,
    ReportResult,
    RoundAnnouncement,
    build_config_payload,
    upload_response,
)

VECTORS = Path(__file__).parent / "vectors"
FILES = ("reports.json", "charges.json", "ledger.json", "configs.json", "answers.json")

SECRET = bytes(range(32, 64))


class Tape(RandomSource):
    """A seeded source that writes down what it hands out (uniforms and bytes), for a port to replay."""

    def __init__(self, seed: int) -> None:
        self._source = SeededRandom(seed)
        self.uniforms: list[float] = []
        self.bytes = bytearray()

    def uniform(self, shape: Shape) -> Any:
        out = self._source.uniform(shape)
        self.uniforms.extend(float(u) for u in np.ravel(out))
        return out

    def random_bytes(self, n: int) -> Any:
        out = self._source.random_bytes(n)
        self.bytes.extend(bytes(out))
        return out


def _metric(name: str, encoding: dict[str, Any], mode: str, level: float | None, *,
            irr: tuple[float | None, float | None] = (None, None), value_kind: str = "set",
            none_value: str | None = None) -> MetricParams:
    return MetricParams.from_dict({
        "version": 1, "name": name, "encoding": encoding, "mode": mode, "level": level,
        "irr_p": irr[0], "irr_q": irr[1], "value_kind": value_kind, "none_value": none_value,
        "time_precision": 3600, "min_batch_size": 10,
    })


BLOOM = {"kind": "bloom", "num_bits": 128, "num_hashes": 2, "num_cohorts": 64, "hashing": "mmh3"}
# (metric, cohort, value, steps): a step is (kind, level, irr) with kind "first", "fresh" or "relaxed";
# irr None keeps the IRR of the step before.
Step = tuple[str, float, tuple[float | None, float | None] | None]
SCENARIOS: list[tuple[MetricParams, int, Any, list[Step]]] = [
    (_metric("places", BLOOM, "asymmetric", 1.5, irr=(None, 0.25)), 41, ["home", "café", "東京"], [
        ("first", 1.5, None), ("fresh", 3.0, None), ("relaxed", 4.0, None),
        ("relaxed", 4.0, (None, 0.1)), ("fresh", 6.0, (None, 0.05))]),
    (_metric("browser", {**BLOOM, "num_bits": 64, "num_hashes": 4, "num_cohorts": 8, "hashing": "rappor-md5"},
             "symmetric", 2.0, irr=(0.25, 0.75), value_kind="categorical"), 5, "https://example.com/é", [
        ("first", 2.0, None), ("fresh", 3.0, None), ("relaxed", 3.0, (0.2, 0.8)), ("relaxed", 4.0, None)]),
    (_metric("apps", BLOOM, "symmetric", 1.0), 0, ["mail", "maps"], [
        ("first", 1.0, None), ("fresh", 2.0, None), ("fresh", 3.5, None)]),
    (_metric("visited", {"kind": "direct", "domain": ["none", "park", "gym", "café"]}, "asymmetric", 2.0,
             value_kind="categorical", none_value="none"), 0, "gym", [("first", 2.0, None), ("fresh", 5.0, None)]),
    (_metric("visited-none", {"kind": "direct", "domain": ["none", "park", "gym"]}, "asymmetric", 2.0,
             irr=(None, 0.3), value_kind="categorical", none_value="none"), 0, "none", [("first", 2.0, None)]),
    (_metric("routes", {"kind": "direct", "domain": ["a\x1fb", "a\x1fc", "b\x1fc"]}, "symmetric", 3.0,
             value_kind="categorical"), 0, "a\x1fc", [("first", 3.0, None)]),
    (_metric("queries", {"kind": "prefix", "num_bits": 32, "num_hashes": 2, "lengths": [1, 2, 4, 8]},
             "symmetric", 2.5, irr=(0.1, 0.9)), 2, "weather", [("first", 2.5, None), ("relaxed", 2.5, (0.05, 0.95))]),
    (_metric("exact", BLOOM, "trusted", None), 63, ["home", "work"], [("first", float("inf"), None)]),
]


def _with_irr(params: MetricParams, irr: tuple[float | None, float | None] | None) -> MetricParams:
    return params if irr is None else params.with_irr(irr)


def _level(level: float) -> float | str:
    return "inf" if level == float("inf") else level


def report_scenario(index: int, params: MetricParams, cohort: int, value: Any, steps: list[Step]) -> dict[str, Any]:
    """One window of one client: its first report and a round's re-send per later step."""
    value_arg = value if isinstance(value, str) else tuple(value)
    window = 1_700_002_800
    key = noise_key(window, canonical_value(value_arg))
    irr: tuple[float | None, float | None] = (params.irr_p, params.irr_q)
    chain: list[float] = []
    sent = 0
    before: Randomizer | None = None
    reports = []
    for number, (kind, level, new_irr) in enumerate(steps):
        irr = irr if new_irr is None else new_irr
        current = params.with_irr(irr) if params.local_mechanism.randomized else params
        chain.append(level)
        plan = ReportPlan(SECRET, current, cohort, level)
        tape = Tape(1000 * index + number)
        if kind == "relaxed":
            assert before is not None, "a relaxed re-send follows a report"
            payload = plan.relaxed_payload(value_arg, key, tuple(chain), sent, before, tape)
        else:
            masks = irr_masks(plan.randomizer, tape.uniform(params.num_bits).reshape(1, -1))[0]
            payload = plan.payload(value_arg, key, masks, chain=tuple(chain) if len(chain) > 1 else None)
        bits = payload[PAYLOAD_HEADER.size:]
        permanent = plan.permanent(plan.encode(value_arg), key, tuple(chain) if len(chain) > 1 else None)
        reports.append({
            "kind": kind, "level": _level(level), "irr": list(irr), "chain": [_level(v) for v in chain],
            "distinct_chain": [_level(v) for v in distinct_levels(chain)],
            "uniforms": tape.uniforms, "bytes_hex": bytes(tape.bytes).hex(),
            "permanent_hex": permanent.to_bytes(len(bits), "little").hex(), "payload_hex": payload.hex(),
        })
        sent = int.from_bytes(bits, "little")
        before = current.randomizer(level)
    return {"params": params.to_dict(), "secret_hex": SECRET.hex(), "cohort": cohort, "window": window,
            "value": value, "noise_key_hex": key.hex(), "reports": reports}


def make_reports() -> dict[str, Any]:
    return {"section": "docs/wire.md 2-4 and client_sdk.memo: every kind of report, with its randomness",
            "note": "uniforms feed the IRR (one per bit, compared with irr_p and irr_q); bytes feed the exact "
                    "Bernoulli sampler of a relaxed IRR step (protocol.exact.bernoulli_choose)",
            "cases": [report_scenario(i, *s) for i, s in enumerate(SCENARIOS)]}


ChargeCase = tuple[MetricParams, list[float], list[tuple[float | None, float | None] | None], list[bool]]


def _charge_cases() -> list[ChargeCase]:
    asym = _metric("a", BLOOM, "asymmetric", 1.5)
    asym_irr = _metric("b", BLOOM, "asymmetric", 1.5, irr=(None, 0.25))
    sym = _metric("s", BLOOM, "symmetric", 1.0)
    sym_cat = _metric("c", BLOOM, "symmetric", 2.0, irr=(0.25, 0.75), value_kind="categorical")
    direct = _metric("d", {"kind": "direct", "domain": ["none", "x", "y"]}, "asymmetric", 2.0,
                     value_kind="categorical", none_value="none")
    cases: list[ChargeCase] = []
    for params in (asym, asym_irr, sym, sym_cat, direct):
        lv = float(params.level or 1.0)
        cases.append((params, [lv], [None], []))
        cases.append((params, [lv, lv * 2], [None, None], [False]))
        cases.append((params, [lv, lv * 2, lv * 3], [None, None, None], [False, False]))
    for level in (0.1, 0.5, 0.7, 1.0, 1.25, 2.0, 3.3, 8.0, 16.0):
        for params in (asym, sym, asym_irr, sym_cat):
            cases.append((params, [level], [None], []))
    cases.append((asym_irr, [1.5, 3.0], [None, None], [True]))
    cases.append((asym_irr, [1.5, 1.5], [None, (None, 0.1)], [True]))
    cases.append((asym_irr, [1.5, 3.0, 3.0], [None, None, (None, 0.1)], [False, True]))
    cases.append((sym_cat, [2.0, 3.0], [None, (0.2, 0.8)], [True]))
    cases.append((sym_cat, [2.0, 2.0], [None, (0.2, 0.8)], [False]))
    # symmetric chains enclosed up to 10 distinct levels; 11 are charged the continuous bound
    for n in (4, 10, 11):
        cases.append((sym, [1.0 + 0.5 * i for i in range(n)], [None] * n, [False] * (n - 1)))
    cases.append((sym_cat, [2.0, 2.5, 2.5, 4.0], [None, None, (0.2, 0.8), (0.1, 0.9)], [False, True, True]))
    cases.append((sym_cat, [2.0, 2.5, 3.0], [None, None, None], [False, False]))
    cases.append((asym_irr, [1.5, 2.0, 2.0, 3.0, 3.0], [None, None, (None, 0.2), (None, 0.1), (None, 0.05)],
                  [False, True, True, False]))
    many = [1.5 + 0.25 * i for i in range(9)]
    cases.append((asym_irr, many, [None] * 9, [False] * 8))  # past 8 reports: bounds only
    cases.append((asym_irr, many, [None] * 8 + [(None, 0.1)], [False] * 7 + [True]))
    return cases


def make_charges() -> dict[str, Any]:
    cases = []
    for params, levels, irrs, relaxed in _charge_cases():
        epsilon, exact = window_cost(params, levels, irrs, relaxed)
        cases.append({"params": params.to_dict(), "levels": levels,
                      "irrs": [None if i is None else list(i) for i in irrs], "relaxed": relaxed,
                      "epsilon": epsilon, "micro": round(epsilon * 1_000_000), "exact": exact})
    return {"section": "client_sdk.ledger.window_cost: one window's charge, rounded up to 1e-6",
            "cases": cases}


Op = tuple[str, int, float, tuple[float | None, float | None] | None]  # (kind, window, level_to, irr)
LEDGER_SCENARIOS: list[tuple[MetricParams, float, int | None, list[Op]]] = [
    (_metric("a", BLOOM, "asymmetric", 1.5), 5.0, None, [
        ("report", 0, 0, None), ("round", 0, 3.0, None), ("report", 3600, 0, None), ("round", 3600, 2.0, None),
        ("round", 3600, 3.5, None), ("report", 7200, 0, None)]),
    (_metric("c", BLOOM, "symmetric", 2.0, irr=(0.25, 0.75), value_kind="categorical"), 12.0, 86_400, [
        ("report", 0, 0, None), ("round", 0, 3.0, (0.2, 0.8)), ("report", 3600, 0, None), ("report", 7200, 0, None),
        ("report", 86_400, 0, None), ("round", 86_400, 3.0, (0.1, 0.9)), ("report", 90_000, 0, None)]),
    (_metric("s", BLOOM, "symmetric", 1.0), 2.9, None, [
        ("report", 0, 0, None), ("round", 0, 1.5, None), ("round", 0, 2.0, None), ("round", 3600, 3.0, None),
        ("report", 3600, 0, None)]),
]


def _ledger_step(record: MetricRecord, params: MetricParams, ceiling: float, op: Op, round_id: int) -> dict[str, Any]:
    """One operation as client_sdk.Client does it (its _report_at and relax), on the record."""
    kind, window, level_to, irr = op
    try:
        if kind == "report":
            check_new_window(record, params, ceiling, 0.0, window=window)
            record.close_window(params)
            step = len(record.levels) - 1
            record.current = WindowRelease(window=window, value="v", first_step=step, last_step=step, report_id="r",
                                           sent="00" if params.with_irr(record.irr).irr_q is not None else None)
        else:
            if record.current is not None and record.current.window < window:
                record.close_window(params)  # Client._settle: a past window is final
            step = RoundStep.of(params, record.levels[-1], record.irrs[-1], level_to, irr)
            step.check()
            current = record.current
            after = record.window_chain().after(step, params, sent_kept=current is not None and current.sent is not None)
            check_relaxation(record, params, after, ceiling, 0.0)
            relaxed = bool(after.relaxed) and after.relaxed[-1]
            record.levels.append(level_to)
            record.irrs.append(record.irrs[-1] if irr is None else irr)
            record.rounds.append(round_id)
            if record.current is not None:
                record.current.last_step = record.step
                if relaxed:
                    record.current.relaxed.append(record.step)
        outcome: dict[str, Any] = {"ok": True}
    except BudgetExceeded as exc:
        outcome = {"ok": False, "error": "budget_exceeded", "requested": exc.requested, "remaining": exc.remaining}
    except (TighteningRefused, RoundRepeats):
        outcome = {"ok": False, "error": "tightening_refused"}
    return {**outcome, "spent_micro": to_micro(record.spent(params)[0])}


def make_ledger() -> dict[str, Any]:
    cases = []
    for params, ceiling, period, ops in LEDGER_SCENARIOS:
        record = MetricRecord(params=params.to_dict(), digest="d", cohort=0, levels=[float(params.level or 0)],
                              rounds=[0], period=period)
        steps = []
        for number, op in enumerate(ops, start=1):
            steps.append({"op": op[0], "window": op[1], "level_to": op[2], "irr": None if op[3] is None else list(op[3]),
                          **_ledger_step(record, params, ceiling, op, number)})
        cases.append({"params": params.to_dict(), "ceiling": ceiling, "period": period, "steps": steps})
    return {"section": "client_sdk.ledger: reports in new windows and rounds against lifetime and renewing ceilings",
            "cases": cases}


def _keys(seed: int) -> tuple[Ed25519PrivateKey, X25519PrivateKey]:
    return (Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32),
            X25519PrivateKey.from_private_bytes(bytes([seed + 1]) * 32))


def make_configs() -> dict[str, Any]:
    sign, seal = _keys(7)
    nxt, _ = _keys(9)
    seal_raw = seal.public_key().public_bytes_raw()
    sign_raw = sign.public_key().public_bytes_raw()
    next_raw = nxt.public_key().public_bytes_raw()
    places = SCENARIOS[0][0]
    entry = MetricEntry.of(places, current_round=3, current_level=2.0)
    round_doc = sign_document(sign, RoundAnnouncement(
        round_id=3, metric="places", params_digest=entry.digest, level_from=1.5, level_to=2.0, cohorts=None,
        opened_at=1_700_000_000, expires_at=1_700_086_400).to_payload())
    payload = build_config_payload(issued_at=1_700_000_100, aggregator=public_key_info(seal_raw, sign_raw, next_raw),
                                   metrics=[entry, MetricEntry.of(SCENARIOS[1][0], current_round=0,
                                                                  current_level=2.0)],
                                   rounds=[round_doc], sync_interval=600)
    rotating = sign_document(sign, payload)
    after = build_config_payload(issued_at=1_700_000_200, aggregator=public_key_info(seal_raw, next_raw),
                                 metrics=[MetricEntry.of(places, current_round=0, current_level=1.5)], rounds=[])
    rotated = sign_document(nxt, after)
    tampered = copy.deepcopy(rotating)
    tampered["payload"]["metrics"][0]["current_level"] = 2.5
    float_changed = json.dumps(rotating).replace('"level_to": 2.0', '"level_to": 2')
    return {"section": "docs/wire.md 8: signed configs, rounds and a signing-key rotation",
            "pinned_sign_public_hex": sign_raw.hex(), "next_sign_public_hex": next_raw.hex(),
            "rotating": json.dumps(rotating), "rotated": json.dumps(rotated),
            "refused": [{"why": "payload changed after signing", "field": "signature", "text": json.dumps(tampered)},
                        {"why": "a float written as an integer (2.0 -> 2) is another canonical text",
                         "field": "signature", "text": float_changed},
                        {"why": "signed by a key never announced", "field": "key_id", "text": json.dumps(
                            sign_document(_keys(11)[0], payload))}]}


def _id(i: int) -> str:
    return f"{i:02d}" + "A" * 20  # 22 base64url characters: 16 bytes


_CLIPPED = "clipped: 3 of the report's ones dropped at random, 2 kept (max_items)"
_ANSWERS: list[tuple[str, int, list[ReportResult], int | None, int | None]] = [
    ("wire 1: two accepted", 1, [ReportResult.of(_id(0), "accepted"), ReportResult.of(_id(1), "accepted")],
     None, None),
    ("wire 1: every final status; a clock status without retry_after is final", 1, [
        ReportResult.of(_id(0), "accepted"), ReportResult.of(_id(1), "replayed"),
        ReportResult(report_id=_id(2), status="outdated_config", field="params_digest", detail="fetch /v1/config"),
        ReportResult(report_id=_id(3), status="too_early", field="window", detail="starts in the future"),
        ReportResult(report_id=_id(4), status="expired", field="window", detail="is older than the retention period"),
        ReportResult(report_id=_id(5), status="unknown_metric", field="metric", detail="no metric named 'x'"),
        ReportResult(report_id=_id(6), status="invalid_message", field="payload.cohort", detail="out of range"),
        ReportResult(report_id=_id(7), status="decrypt_error", field="sealed", detail=None)], None, None),
    ("wire 2: a window ahead of the server's clock: kept, resent after retry_after", 2, [
        ReportResult.of(_id(0), "accepted"),
        ReportResult(report_id=_id(1), status="too_early", field="window", detail="starts in the future",
                     retry_after=3600)], 1_795_737_600, None),
    ("wire 2: the server suspects its clock: expired is not final either; the wire's longest wait", 2, [
        ReportResult(report_id=_id(0), status="expired", field="window", detail="is older than the retention period",
                     retry_after=3600),
        ReportResult(report_id=_id(1), status="too_early", field="window", detail="starts in the future",
                     retry_after=MAX_RETRY_AFTER),
        ReportResult(report_id=_id(2), status="expired", field="window", detail="is older than the retention period")],
     1_795_737_601, None),
    ("wire 3: one of two accepted reports clipped to max_items", 3, [
        ReportResult.of(_id(0), "accepted", _CLIPPED), ReportResult.of(_id(1), "accepted"),
        ReportResult(report_id=_id(2), status="too_early", field="window", detail="starts in the future",
                     retry_after=60)], 1_795_737_602, 1),
    ("wire 3: nothing clipped says 0", 3, [ReportResult.of(_id(0), "accepted")], 1_795_737_603, 0),
    ("wire 3: nothing accepted", 3, [ReportResult(report_id=_id(0), status="unknown_metric", field="metric",
                                                  detail="no metric named 'x'")], 1_795_737_604, 0),
]


def _answer_text(results: list[ReportResult], server_time: int | None, clipped: int | None) -> str:
    """The body as the aggregator's JSON provider writes it (sorted keys, compact)."""
    return json.dumps(upload_response(results, server_time=server_time, clipped=clipped), sort_keys=True,
                      separators=(",", ":"))


def _refused_answers() -> list[dict[str, Any]]:
    one = json.loads(_answer_text([ReportResult.of(_id(0), "accepted")], 1_795_737_600, 0))

    def edit(why: str, field: str, change: Any) -> dict[str, Any]:
        body = copy.deepcopy(one)
        change(body)
        return {"why": why, "field": field, "text": json.dumps(body, sort_keys=True), "count": 1}

    def result(**fields: Any) -> Any:
        return lambda body: body["results"][0].update(fields)

    return [
        edit("no results", "results", lambda b: b.pop("results")),
        edit("results not a list", "results", lambda b: b.update(results={"0": 1})),
        edit("a key no version has", "extra", lambda b: b.update(extra=1)),
        edit("a result that is not an object", "results[0]", lambda b: b.update(results=[7])),
        edit("a result's key no version has", "results[0].reason", result(reason="x")),
        edit("a result without status", "results[0].status", lambda b: b["results"][0].pop("status")),
        edit("an unknown status", "results[0].status", result(status="stored")),
        edit("a report id that is not text", "results[0].report_id", result(report_id=7)),
        edit("a detail that is not text", "results[0].detail", result(detail=3)),
        edit("retry_after on an accepted report", "results[0].retry_after", result(retry_after=60)),
        edit("retry_after 0", "results[0].retry_after", result(status="too_early", retry_after=0)),
        edit("retry_after over the wire's longest", "results[0].retry_after",
             result(status="too_early", retry_after=MAX_RETRY_AFTER + 1)),
        edit("retry_after as text", "results[0].retry_after", result(status="too_early", retry_after="60")),
        edit("accepted without its key", "accepted", lambda b: b.pop("accepted")),
        edit("accepted says more than the results", "accepted", lambda b: b.update(accepted=2)),
        edit("accepted says fewer than the results", "accepted", lambda b: b.update(accepted=0)),
        edit("accepted as a boolean", "accepted", lambda b: b.update(accepted=True)),
        edit("server_time negative", "server_time", lambda b: b.update(server_time=-1)),
        edit("server_time as text", "server_time", lambda b: b.update(server_time="1795737600")),
        edit("clipped more than accepted", "clipped", lambda b: b.update(clipped=2)),
        edit("clipped negative", "clipped", lambda b: b.update(clipped=-1)),
        edit("clipped as a boolean", "clipped", lambda b: b.update(clipped=True)),
        edit("clipped as text", "clipped", lambda b: b.update(clipped="1")),
    ]


def make_answers() -> dict[str, Any]:
    cases = []
    for why, wire, results, server_time, clipped in _ANSWERS:
        cases.append({"why": why, "wire": wire, "count": len(results),
                      "text": _answer_text(results, server_time, clipped),
                      "expect": {"accepted": sum(r.status == "accepted" for r in results), "server_time": server_time,
                                 "clipped": clipped,
                                 "results": [{"report_id": r.report_id, "status": r.status, "field": r.field,
                                              "detail": r.detail, "retry_after": r.retry_after} for r in results]}})
    return {"section": "docs/wire.md 7.4: upload answers of wire versions 1, 2 and 3, and answers a client refuses",
            "cases": cases, "refused": _refused_answers()}


MAKERS = {"reports.json": make_reports, "charges.json": make_charges, "ledger.json": make_ledger,
          "configs.json": make_configs, "answers.json": make_answers}


def render(name: str) -> str:
    return json.dumps(MAKERS[name](), indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    for name in FILES:
        (VECTORS / name).write_text(render(name), encoding="utf-8")
        print(f"wrote {VECTORS / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
