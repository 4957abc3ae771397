/**
 * The proven epsilon of a window's reports when they carry an IRR (the reference is
 * `protocol.irr_relaxation.enclosed_report_chain_epsilon`): one report per round, each the IRR of
 * that round's memoized bit, relaxed from the previous report or fresh; the memoized bits' law is
 * enclosed from its closed forms, the IRR factors are exact rationals enclosed by their neighbouring
 * doubles, every product and sum is rounded outward, and the logarithms are proven.
 */

import { ParameterError } from "./errors.js";
import { ONE, Rational } from "./exact.js";
import { complement, enclosedExp, enclosedLog, enclosedPatternProbabilities, nextDown, nextUp, toDouble } from "./interval.js";
import { irrLevel, irrStepConditionals } from "./irr.js";
import { MetricParams } from "./params.js";

type Pair = [number, number]; // [lo, hi] of a nonnegative quantity; hi === 0 only for a true 0

function mul(a: Pair, b: Pair): Pair {
  const zero = a[1] === 0 || b[1] === 0;
  return [Math.max(nextDown(a[0] * b[0]), 0), zero ? 0 : nextUp(a[1] * b[1])];
}

/** The pairwise sum over rows (padded with a zero row when odd), as the reference sums them. */
function sumRows(rows: Pair[]): Pair {
  let x = rows;
  while (x.length > 1) {
    if (x.length % 2) x = [...x, [0, 0]];
    const next: Pair[] = [];
    for (let i = 0; i < x.length; i += 2) {
      const zero = x[i][1] === 0 && x[i + 1][1] === 0;
      next.push([Math.max(nextDown(x[i][0] + x[i + 1][0]), 0), zero ? 0 : nextUp(x[i][1] + x[i + 1][1])]);
    }
    x = next;
  }
  return x[0];
}

/** The memoized bit's patterns over the distinct levels and `P(pattern | b)`, enclosed; null: no bound. */
function memoLaw(params: MetricParams, levels: number[]): { patterns: number[][]; weights: [Pair[], Pair[]] } | null {
  if (params.mode === "asymmetric") {
    // b = 1 stays 1; b = 0 reads j ones then zeros with probability e^{-L_j/2} - e^{-L_{j+1}/2}
    if (levels.some((lv) => Rational.of(-lv / 2).cmp(Rational.of(lv).mul(new Rational(-1n, 2n))) !== 0)) return null;
    const n = levels.length;
    const ones: Pair[] = [...levels.map((lv) => enclosedExp(-lv / 2)), [0, 0]];
    const patterns = Array.from({ length: n + 1 }, (_, j) => Array.from({ length: n }, (_, i) => (i < j ? 1 : 0)));
    const above: Pair[] = [[1, 1], ...ones.slice(0, -1)];
    const zero: Pair[] = above.map((a, j) => [Math.max(nextDown(a[0] - ones[j][1]), 0), nextUp(a[1] - ones[j][0])]);
    const one: Pair[] = [...Array(n).fill([0, 0]), [1, 1]];
    return { patterns, weights: [zero, one] };
  }
  const probs = enclosedPatternProbabilities(levels);
  if (probs === null) return null;
  const keys = [...probs.keys()];
  return {
    patterns: keys.map((k) => [...k].map(Number)),
    weights: [keys.map((k) => probs.get(k) as Pair), keys.map((k) => probs.get(complement(k)) as Pair)],
  };
}

/** Round `r`'s `P(S_r = y | S_{r-1} = s, memoized m then m')` at `8m + 4m' + 2s + y`, enclosed. */
function factorTables(steps: MetricParams[], flags: boolean[]): Pair[][] {
  const irr = steps.map(irrLevel);
  return irr.map((level, r) => {
    const step = r && flags[r - 1] ? irrStepConditionals(irr[r - 1], level) : null;
    const out: Pair[] = [];
    for (const m of [0, 1]) for (const mNow of [0, 1]) for (const s of [0, 1]) for (const y of [0, 1]) {
      const one = step === null || m !== mNow ? level[mNow] : step[s + 2 * mNow];
      const v = y ? one : ONE.sub(one);
      out.push([toDouble(v, false), toDouble(v, true)]);
    }
    return out;
  });
}

/** `max_y ln(num_y / den_y)` over the sequences `num` can send, enclosed (infinite when `den` cannot send one). */
function logRatio(num: Pair[], den: Pair[]): Pair {
  let low = -Infinity;
  let high = -Infinity;
  for (let y = 0; y < num.length; y++) {
    if (!(num[y][1] > 0)) continue;
    if (den[y][1] === 0) return [Infinity, Infinity];
    low = Math.max(low, nextDown(num[y][0] / den[y][1]));
    high = Math.max(high, nextUp(num[y][1] / den[y][0]));
  }
  return enclosedLog(Math.max(1, low), Math.max(1, high));
}

function combine(params: MetricParams, up: Rational | number, down: Rational | number): Rational | number {
  const k = params.num_hashes;
  if (typeof up === "number" || typeof down === "number") {
    const u = Number(up);
    const d = Number(down);
    if (params.mode === "asymmetric") return k * u;
    return params.value_kind === "categorical" ? k * (u + d) : k * Math.max(u, d);
  }
  const kk = new Rational(BigInt(k));
  if (params.mode === "asymmetric") return kk.mul(up);
  if (params.value_kind === "categorical") return kk.mul(up.add(down));
  return kk.mul(up.cmp(down) >= 0 ? up : down);
}

/** The mode's chain epsilon of two doubles in exact arithmetic, rounded to a double on one side. */
function chainBound(params: MetricParams, up: number, down: number, upward: boolean): number {
  if (combine(params, up, down) === Infinity) return Infinity;
  const exact = (v: number) => (Number.isFinite(v) ? Rational.of(v) : new Rational(0n));
  return toDouble(combine(params, exact(up), exact(down)) as Rational, upward);
}

/**
 * `[lo, hi]` around the epsilon of one report per round, round `r` made with `steps[r]` (the metric
 * with that round's IRR) at `levels[r]`; `relaxed[r - 1]`: round `r`'s report drawn from the one
 * before by the relaxed IRR step. `[0, Infinity]` where doubles give no bound.
 */
export function enclosedReportChainEpsilon(steps: MetricParams[], levels: number[], relaxed: boolean[]): Pair {
  const params = steps[0];
  for (let i = 1; i < levels.length; i++) {
    if (levels[i] < levels[i - 1]) throw new ParameterError("levels", "must not decrease from round to round");
  }
  const distinct = [...new Set(levels)].sort((a, b) => a - b);
  const index = levels.map((lv) => distinct.indexOf(lv));
  const law = memoLaw(params, distinct);
  if (law === null) return [0, Infinity];
  const { patterns, weights } = law;
  const memo = index.map((i) => patterns.map((m) => m[i]));
  const tables = factorTables(steps, relaxed);
  // given[p][sequence], the sequence's last report in its low bit
  let given: Pair[][] = patterns.map((_, p) => [0, 1].map((y) => tables[0][memo[0][p] * 4 + y]));
  for (let r = 1; r < steps.length; r++) {
    given = given.map((row, p) => row.flatMap((g, c) =>
      [0, 1].map((y) => mul(g, tables[r][memo[r - 1][p] * 8 + memo[r][p] * 4 + (c & 1) * 2 + y]))));
  }
  const columns = given[0].length;
  const perBit = [0, 1].map((b) => Array.from({ length: columns }, (_, c) =>
    sumRows(patterns.map((_, p) => mul(weights[b][p], given[p][c])))));
  const up = logRatio(perBit[1], perBit[0]);
  const down = logRatio(perBit[0], perBit[1]);
  return [chainBound(params, up[0], down[0], false), chainBound(params, up[1], down[1], true)];
}
