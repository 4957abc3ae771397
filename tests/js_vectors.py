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
from protocol.wire import PAYLOAD_HEADER, MetricEntry, RoundAnnouncement, build_config_payload

VECTORS = Path(__file__).parent / "vectors"
FILES = ("reports.json", "charges.json", "ledger.json", "configs.json")

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


MAKERS = {"reports.json": make_reports, "charges.json": make_charges, "ledger.json": make_ledger,
          "configs.json": make_configs}


def render(name: str) -> str:
    return json.dumps(MAKERS[name](), indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    for name in FILES:
        (VECTORS / name).write_text(render(name), encoding="utf-8")
        print(f"wrote {VECTORS / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
