// The ledger against the Python ledger's charges (tests/vectors/charges.json), to the micro-epsilon.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as os from "../dist/index.js";

const text = readFileSync(new URL("../../tests/vectors/charges.json", import.meta.url), "utf8");

test("charges.json: every window charge is the reference's, to the micro-epsilon", () => {
  const cases = os.parseJson(text).cases.map((c) => ({ ...os.plain(c), params: os.metricParams(c.params) }));
  assert.ok(cases.length >= 60);
  for (const c of cases) {
    assert.equal(os.windowMicro(c.params, c.levels, c.irrs, c.relaxed), c.micro,
      JSON.stringify({ name: c.params.name, levels: c.levels, irrs: c.irrs, relaxed: c.relaxed }));
  }
});

test("enclosures: exponentials and logarithms are proven, nextUp/nextDown step one double", () => {
  for (const x of [-16, -1.5, -0.75, 0, 1e-9, 0.5, 3, 40]) {
    const [lo, hi] = os.enclosedExp(x);
    assert.ok(lo <= Math.exp(x) * (1 + 1e-15) && hi >= Math.exp(x) * (1 - 1e-15) && hi - lo <= 4e-16 * Math.exp(x), `${x}`);
  }
  assert.equal(os.nextUp(1), 1 + 2 ** -52);
  assert.equal(os.nextDown(1), 1 - 2 ** -53);
  assert.equal(os.nextUp(0), 5e-324);
  const [lo, hi] = os.enclosedLog(3, 3);
  assert.ok(lo <= Math.log(3) && Math.log(3) <= hi && hi - lo < 1e-15);
  // RAPPOR's ln 3: f = 1/2, one level of 2 ln 2
  const [a, b] = os.enclosedSequenceEpsilon([2 * Math.log(2)]);
  assert.ok(a <= Math.log(3) && Math.log(3) <= b);
});

test("ledger.json: reports and rounds against lifetime and renewing ceilings, as the Python ledger decides", () => {
  const ledgerText = readFileSync(new URL("../../tests/vectors/ledger.json", import.meta.url), "utf8");
  for (const raw of os.parseJson(ledgerText).cases) {
    const c = { ...os.plain(raw), params: os.metricParams(raw.params) };
    const ceiling = { epsilon: c.ceiling, period: c.period };
    const record = os.newRecord(c.params, "d", 0);
    c.steps.forEach((step, i) => {
      const where = `${c.params.name} step ${i + 1} (${step.op})`;
      let outcome = { ok: true };
      try {
        if (step.op === "report") {
          os.chargeNewWindow(record, c.params, ceiling, step.window, "v", "00");
        } else {
          os.settle(record, ceiling, step.window);
          const relaxed = os.resendRelaxed(record, c.params, step.level_to, step.irr);
          os.chargeRelaxation(record, c.params, ceiling, step.level_to, i + 1, step.irr, relaxed);
        }
      } catch (e) {
        if (e instanceof os.BudgetExceeded) {
          outcome = { ok: false, error: "budget_exceeded", requested: e.requested, remaining: e.remaining };
        } else if (e instanceof os.TighteningRefused) outcome = { ok: false, error: "tightening_refused" };
        else throw e;
      }
      const { spent_micro: spent, op, window, level_to: levelTo, irr, ...expected } = step;
      assert.deepEqual(outcome, expected, where);
      assert.equal(record.closed + (record.current?.micro ?? 0), spent, where);
    });
  }
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
  const ceiling = { epsilon: 3, period: null };
  const r = os.newRecord(params, "d", 0);
  os.chargeNewWindow(r, params, ceiling, 0, "a", "00");
  assert.equal(r.current.micro, 1_000_000);
  assert.equal(os.chargeRelaxation(r, params, ceiling, 2, 1), 1_000_000); // 2 * 2/2 - 2 * 1/2
  assert.throws(() => os.chargeRelaxation(r, params, ceiling, 1.5, 2), os.TighteningRefused);
  assert.throws(() => os.chargeNewWindow(r, params, ceiling, 3600, "b", "00"), (e) => e instanceof os.BudgetExceeded
    && e.requested === 2 && e.remaining === 1);
  assert.equal(r.current.window, 0, "nothing changed by a refusal");
  const renewing = { epsilon: 2, period: 86400 };
  const r2 = os.newRecord(params, "d", 0);
  os.chargeNewWindow(r2, params, renewing, 0, "a", "00");
  os.chargeNewWindow(r2, params, renewing, 3600, "a", "00");
  assert.throws(() => os.chargeNewWindow(r2, params, renewing, 7200, "a", "00"), os.BudgetExceeded);
  os.chargeNewWindow(r2, params, renewing, 86400, "a", "00"); // the next day's budget
  // A ceiling that is no exact double of its decimal (2.9) still allows a charge of exactly 2.9.
  const odd = os.newRecord({ ...params, level: 2.9 }, "d", 0);
  os.chargeNewWindow(odd, { ...params, level: 2.9 }, { epsilon: 2.9, period: null }, 0, "a", "00");
  assert.equal(os.budgetOf("m", odd, { epsilon: 2.9, period: null }, 0).remaining, 0);
});
