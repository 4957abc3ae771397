// The ledger against the Python ledger's charges (tests/vectors/charges.json), to the micro-epsilon.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as os from "../dist/index.js";

const text = readFileSync(new URL("../../tests/vectors/charges.json", import.meta.url), "utf8");

test("charges.json: every charge is the reference's or refused, and the simple ones are never refused", () => {
  const cases = os.parseJson(text).cases.map((c) => ({ ...os.plain(c), params: os.metricParams(c.params) }));
  let same = 0;
  let refused = 0;
  for (const c of cases) {
    const irrs = c.irrs.map((i) => i);
    const chainWithoutIrr = c.irrs.every((i) => i === null) && c.params.irr_q === null;
    const mustCharge = c.levels.length === 1 || (c.params.mode === "asymmetric" && chainWithoutIrr);
    try {
      const micro = os.windowMicro(c.params, c.levels, irrs, c.relaxed);
      assert.equal(micro, c.micro, JSON.stringify({ name: c.params.name, levels: c.levels, irrs: c.irrs }));
      same++;
    } catch (e) {
      if (!(e instanceof os.ChargeUnproven) || mustCharge) throw e;
      refused++;
    }
  }
  assert.equal(same + refused, cases.length);
  assert.ok(same >= 45, `charged ${same}`);
});

test("microCeil rounds up exactly, never down", () => {
  assert.equal(os.microCeil(1.0000000009), 1000001);
  assert.equal(os.microCeil(0.75), 750000);
  assert.equal(os.microCeil(0.1), 100000); // the double nearest 0.1 stands for it
  assert.equal(os.microCeil(0.1 + 2 ** -40), 100001);
});

test("ledger: a new window within the ceiling, refusals, relaxation and tightening", () => {
  const params = os.metricParams(os.parseJson(JSON.stringify({
    version: 1, name: "m", encoding: { kind: "bloom", num_bits: 16, num_hashes: 2, num_cohorts: 4, hashing: "mmh3" },
    mode: "asymmetric", level: 1, irr_p: null, irr_q: null, value_kind: "set", none_value: null,
    time_precision: 3600, min_batch_size: 1,
  })));
  const ceiling = { micro: 3_000_000, period: null };
  const r = os.newRecord(params, "d", 0);
  os.chargeNewWindow(r, params, ceiling, 0, "a");
  assert.equal(r.current.micro, 1_000_000);
  assert.equal(os.chargeRelaxation(r, params, ceiling, 2, 1), 1_000_000); // 2 * 2/2 - 2 * 1/2
  assert.throws(() => os.chargeRelaxation(r, params, ceiling, 1.5, 2), os.TighteningRefused);
  assert.throws(() => os.chargeNewWindow(r, params, ceiling, 3600, "b"), (e) => e instanceof os.BudgetExceeded
    && e.requested === 2 && e.remaining === 1);
  assert.equal(r.current.window, 0, "nothing changed by a refusal");
  const renewing = { micro: 2_000_000, period: 86400 };
  const r2 = os.newRecord(params, "d", 0);
  os.chargeNewWindow(r2, params, renewing, 0, "a");
  os.chargeNewWindow(r2, params, renewing, 3600, "a");
  assert.throws(() => os.chargeNewWindow(r2, params, renewing, 7200, "a"), os.BudgetExceeded);
  os.chargeNewWindow(r2, params, renewing, 86400, "a"); // the next day's budget
});
