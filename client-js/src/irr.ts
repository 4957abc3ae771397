/**
 * The instantaneous randomized response (fresh per report) and its relaxation between rounds
 * (`protocol.irr_relaxation`): a round that relaxes the IRR draws its re-send from the window's
 * last report, so the window's reports cost one report at the last IRR level.
 */

import { ParameterError } from "./errors.js";
import { bernoulliChoose, ONE, Rational, ZERO } from "./exact.js";
import { MetricParams } from "./params.js";

export function hasIrr(params: MetricParams): boolean {
  return params.mode !== "trusted" && params.irr_q !== null;
}

/**
 * The report's bits from the permanent bits and one uniform per bit: asymmetric `perm | (u < q)`;
 * symmetric `(u < p) | (perm & (u < q))`; no IRR: the permanent bits.
 */
export function applyIrr(params: MetricParams, permanent: Uint8Array, u: Float64Array): Uint8Array {
  if (!hasIrr(params)) return permanent.slice();
  const q = params.irr_q as number;
  const out = new Uint8Array(permanent.length);
  for (let j = 0; j < permanent.length; j++) {
    const belowQ = u[j] < q ? 1 : 0;
    if (params.mode === "asymmetric") out[j] = permanent[j] | belowQ;
    else out[j] = (u[j] < (params.irr_p as number) ? 1 : 0) | (permanent[j] & belowQ);
  }
  return out;
}

/** `(P(report 1 | memoized 0), P(report 1 | memoized 1))` of the IRR, exact; none: `(0, 1)`. */
export function irrLevel(params: MetricParams): [Rational, Rational] {
  if (params.mode === "trusted") throw new ParameterError("mode", "the trusted mode has no IRR to relax");
  if (params.irr_q === null) return [ZERO, ONE];
  if (params.mode === "asymmetric") return [Rational.of(params.irr_q), ONE];
  if (params.irr_p === null) return [ZERO, ONE];
  return [Rational.of(params.irr_p), Rational.of(params.irr_q)];
}

/** `(T(1|0), T(1|1))` of the channel `T` with `before = T o after`; refuses a tightening (field `irr`). */
export function irrGarbling(before: [Rational, Rational], after: [Rational, Rational]): [Rational, Rational] {
  const [p1, q1] = before;
  const [p2, q2] = after;
  if (!(q2.cmp(p2) > 0)) throw new ParameterError("irr", "the relaxed IRR must have q > p");
  const span = q2.sub(p2);
  const low = p1.mul(q2).sub(q1.mul(p2)).div(span);
  const high = q1.mul(ONE.sub(p2)).sub(p1.mul(ONE.sub(q2))).div(span);
  const inUnit = (x: Rational) => x.cmp(ZERO) >= 0 && x.cmp(ONE) <= 0;
  if (!inUnit(low) || !inUnit(high)) {
    throw new ParameterError("irr", "the IRR is not a post-processing of the new one: a relaxed IRR must be at least as informative");
  }
  return [low, high];
}

/** `P(S' = 1 | S = s, B)` at index `s + 2B`, exact. */
export function irrStepConditionals(before: [Rational, Rational], after: [Rational, Rational]): Rational[] {
  const [, tHigh] = irrGarbling(before, after);
  const out: Rational[] = [];
  for (const b of [0, 1]) {
    for (const s of [0, 1]) {
      const fromOne = s ? tHigh : ONE.sub(tHigh);
      const given = s ? before[b] : ONE.sub(before[b]);
      out.push(given.isZero() ? after[b] : after[b].mul(fromOne).div(given));
    }
  }
  return out;
}

/**
 * The next report with `after`'s IRR drawn from `sent` (made with `before`'s IRR from the memoized
 * bits `previous`); a bit whose memoized value changed gets a fresh IRR. Exactly `after`'s IRR in law.
 */
export function relaxInstantaneous(
  permanent: Uint8Array, sent: Uint8Array, previous: Uint8Array, before: MetricParams, after: MetricParams,
  bytes: (n: number) => Uint8Array,
): Uint8Array {
  if (before.mode !== after.mode) throw new ParameterError("mode", "an IRR step keeps the mode");
  const first = irrLevel(before);
  const second = irrLevel(after);
  const step = irrStepConditionals(first, second);
  for (const b of [0, 1]) {
    for (const s of [0, 1]) {
      const possible = s ? first[b] : ONE.sub(first[b]);
      if (possible.isZero() && previous.some((p, j) => p === b && sent[j] === s)) {
        throw new ParameterError("report", `holds a ${s} where the memoized bit ${b} cannot give one`);
      }
    }
  }
  const table = [step[0], step[1], second[0], second[0], step[2], step[3], second[1], second[1]];
  const choice = sent.map((s, j) => s + 2 * (previous[j] !== permanent[j] ? 1 : 0));
  return bernoulliChoose(bytes, table, choice, permanent);
}
