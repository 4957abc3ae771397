/**
 * The privacy ledger: what one window of reports costs, to the micro-epsilon, as the Python client
 * charges it (`client_sdk.ledger.window_cost`), and the records that keep a metric within its
 * ceiling (one value per window, lifetime or renewing budgets, no tightening).
 *
 * Every chain the reference charges is charged here the same way: asymmetric chains exactly
 * (`k * L_last / 2`), symmetric chains and windows of reports with IRR at the upper end of the
 * same proven enclosures (`interval.ts`, `reportchain.ts`: outward-rounded doubles, exponentials
 * in exact integer arithmetic), the smaller of the memoized bits' charge and the reports' charge.
 *
 * A charge that passes through `Math.log`/`Math.exp` (a first report's epsilon, the starting point
 * of a proven logarithm) is accepted only when every double within a relative 1e-12 of it rounds up
 * to the same micro-epsilon, so a last-digit difference between JavaScript engines and the
 * reference's libm cannot change it; otherwise it is refused ({@link ChargeUnproven}), never
 * guessed, and a round that needs it is not joined (the aggregator sees non-participation).
 */

import { BudgetExceeded, ChargeUnproven, ParameterError, TighteningRefused } from "./errors.js";
import { Rational } from "./exact.js";
import { enclosedSequenceEpsilon } from "./interval.js";
import { distinctLevels } from "./noise.js";
import { enclosedReportChainEpsilon } from "./reportchain.js";
import { Irr, MetricParams, withIrr } from "./params.js";

const MICRO = new Rational(1_000_000n);

/**
 * The smallest count of micro-epsilons at or above the double `x` (exact arithmetic), where a double
 * that is the nearest double of a grid decimal stands for that decimal (`protocol.rounding.round_up`).
 */
export function microCeil(x: number): number {
  if (x === Infinity) return Infinity;
  const r = Rational.of(x).mul(MICRO);
  const q = r.num / r.den;
  const grid = Number(r.num % r.den === 0n ? q : q + 1n);
  return (grid - 1) / 1_000_000 === x ? grid - 1 : grid;
}

const SLACK = 1e-12;

/** {@link microCeil} of a value computed with libm, refused when a last-digit difference could change it. */
function provenMicro(x: number, what: string): number {
  const micro = microCeil(x);
  if (!Number.isFinite(x) || microCeil(x * (1 - SLACK)) !== micro || microCeil(x * (1 + SLACK)) !== micro) {
    throw new ChargeUnproven(`${what}: ${x} lies too close to a micro-epsilon boundary to match the reference`);
  }
  return micro;
}

/** Neighbours differ in `k` bits, `2k` for a symmetric categorical value replaced. */
export function bitsChanged(params: MetricParams): number {
  return (params.mode === "symmetric" && params.value_kind === "categorical" ? 2 : 1) * params.num_hashes;
}

function permanentProbabilities(params: MetricParams, level: number): [number, number] {
  if (params.mode === "asymmetric") return [Math.exp(-level / 2.0), 1.0];
  const halfF = Math.exp(-level / 2.0) / 2.0;
  return [halfF, 1.0 - halfF];
}

/** One report's epsilon with the IRR (RAPPOR's eps_1 for the symmetric mode; `k ln(1/p*)` asymmetric). */
function reportEpsilon(params: MetricParams, level: number): number {
  const [p0, p1] = permanentProbabilities(params, level);
  const k = params.num_hashes;
  if (params.mode === "asymmetric") {
    const q = params.irr_q as number;
    return k * Math.log(1.0 / (p0 * 1.0 + (1 - p0) * q));
  }
  const p = params.irr_p as number;
  const q = params.irr_q as number;
  const ps = p0 * q + (1 - p0) * p;
  const qs = p1 * q + (1 - p1) * p;
  if (params.value_kind === "categorical") return k * Math.log((qs * (1.0 - ps)) / (ps * (1.0 - qs)));
  return k * Math.max(Math.log(qs / ps), Math.log((1.0 - ps) / (1.0 - qs)));
}

/** Micro-epsilons of one memoized bit released at each of `levels` (repeats already dropped). */
function bitMicro(params: MetricParams, levels: number[]): number {
  const last = levels[levels.length - 1];
  if (params.mode === "asymmetric") return microCeil(last / 2.0); // exact: P(all ones | 0) = exp(-L_n/2)
  if (levels.length === 1) {
    const halfF = Math.exp(-last / 2.0) / 2.0;
    return provenMicro(Math.log((1.0 - halfF) / halfF), "a symmetric bit's epsilon");
  }
  if (levels.length <= MAX_ENCLOSED_LAPLACE_LEVELS) {
    const [, hi] = enclosedSequenceEpsilon(levels);
    if (hi < last) return provenMicro(hi, "a symmetric chain's enclosure");
  }
  return microCeil(last); // the continuous process's bound
}

/** The symmetric chains enclosed (longer ones are charged the continuous bound `levels[-1]`). */
export const MAX_ENCLOSED_LAPLACE_LEVELS = 10;
/** The longest window chain whose reports' joint law is enclosed (`2^n` report sequences). */
export const MAX_EXACT_REPORT_CHAIN = 8;

/** The window's reports with IRR, enclosed; null where no proven bound is at hand. */
function reportsMicro(steps: MetricParams[], levels: number[], relaxed: boolean[]): number | null {
  if (levels.length > MAX_EXACT_REPORT_CHAIN || distinctLevels(levels).length > MAX_ENCLOSED_LAPLACE_LEVELS) return null;
  let hi: number;
  try {
    hi = enclosedReportChainEpsilon(steps, levels, relaxed)[1];
  } catch (e) {
    if (e instanceof ParameterError) return null; // a chain the law does not cover
    throw e;
  }
  return hi >= 0 && hi < Infinity ? provenMicro(hi, "a window's reports") : null;
}

/**
 * Micro-epsilons one window costs: a report at each of `levels`, with the IRR `irrs[i]` (null: the
 * metric's), `relaxed[i]` when report `i + 1` was drawn from report `i` by the relaxed IRR step.
 * As the reference: the memoized bits' charge, or the reports' when smaller (a post-processing).
 *
 * @throws ChargeUnproven where a libm difference could move the micro-epsilon.
 */
export function windowMicro(
  params: MetricParams, levels: number[], irrs: (Irr | null)[] = levels.map(() => null), relaxed: boolean[] = [],
): number {
  // A pure function of public parameters, remembered: every new window asks it.
  const key = JSON.stringify([params.mode, params.value_kind, params.num_hashes, params.irr_p, params.irr_q, levels,
    irrs, relaxed]);
  let micro = remembered.get(key);
  if (micro === undefined) {
    micro = computeWindowMicro(params, levels, irrs, relaxed);
    if (remembered.size >= 1024) remembered.clear();
    remembered.set(key, micro);
  }
  return micro;
}

const remembered = new Map<string, number>();

function computeWindowMicro(params: MetricParams, levels: number[], irrs: (Irr | null)[], relaxed: boolean[]): number {
  if (params.mode === "trusted") return Infinity;
  if (irrs.length !== levels.length || relaxed.length !== Math.max(0, levels.length - 1)) {
    throw new ParameterError("irrs", "need one IRR per level and one relaxed flag per level after the first");
  }
  const chain = bitsChanged(params) * bitMicro(params, distinctLevels(levels));
  const steps = irrs.map((irr) => withIrr(params, irr));
  if (steps.every((s) => s.irr_q === null)) return chain;
  if (levels.length === 1) {
    return Math.min(chain, provenMicro(reportEpsilon(steps[0], levels[0]), "one report's epsilon"));
  }
  const reports = reportsMicro(steps, levels, relaxed);
  if (reports !== null) return Math.min(chain, reports);
  if (relaxed.some(Boolean)) return chain;
  const fresh = steps.reduce((sum, step, i) => sum + provenMicro(reportEpsilon(step, levels[i]), "one report's epsilon"), 0);
  return Math.min(chain, fresh);
}

export const fromMicro = (micro: number): number => (micro === Infinity ? Infinity : micro / 1_000_000);

/** The one value a metric released in its current window. */
export interface WindowRelease {
  window: number;
  /** base64url of the canonical value. */
  value: string;
  /** The window's chain: each report's level and IRR (its first report, then each round's re-send). */
  levels: number[];
  irrs: Irr[];
  /** `relaxed[i]`: report `i + 1` was drawn from report `i` by the relaxed IRR step. */
  relaxed: boolean[];
  /** The last report's bits as sent (hex, packed): what a relaxed IRR step draws from. */
  sent: string | null;
  /** Micro-epsilons charged for the window so far. */
  micro: number;
}

export interface MetricRecord {
  digest: string;
  cohort: number;
  /** The level, IRR and round reports are made with now. */
  level: number;
  irr: Irr;
  round: number;
  /** Micro-epsilons of windows closed, and of the latest budget period (renewing budgets). */
  closed: number;
  periods: Record<string, number>;
  current: WindowRelease | null;
}

export function newRecord(params: MetricParams, digest: string, cohort: number): MetricRecord {
  return { digest, cohort, level: params.level, irr: [params.irr_p, params.irr_q], round: 0, closed: 0, periods: {},
    current: null };
}

/** A metric's ceiling (epsilon): lifetime, or per period (seconds, aligned to the Unix epoch). */
export interface Ceiling {
  epsilon: number;
  period: number | null;
}

/**
 * `round_up(a + b)` of two printed epsilons (given in micro-epsilons), in micro-epsilons: the
 * reference adds the doubles and rounds the sum up, so a sum one ulp above its decimal counts one
 * micro-epsilon more; the ledger decides on that total, so this client does too.
 */
function roundUpSum(a: number, b: number): number {
  return microCeil(fromMicro(a) + fromMicro(b));
}

/** Whether a total of `micro` micro-epsilons passes the ceiling (the printed decimal against it, as the reference). */
function passes(micro: number, ceiling: Ceiling): boolean {
  return fromMicro(micro) > ceiling.epsilon;
}

/** What is left under the ceiling after `before` micro-epsilons (the reference's float, to the bit). */
function remaining(ceiling: Ceiling, before: number): number {
  return Math.max(0, ceiling.epsilon - fromMicro(before));
}

function periodOf(window: number, period: number | null): string {
  return period === null ? "all" : String(Math.floor(window / period) * period);
}

/** Micro-epsilons counted against the ceiling for a report in `window`, the window's own charge included. */
function spentFor(record: MetricRecord, window: number, ceiling: Ceiling): number {
  if (ceiling.period === null) return record.closed + (record.current?.micro ?? 0);
  const key = periodOf(window, ceiling.period);
  const current = record.current && periodOf(record.current.window, ceiling.period) === key ? record.current.micro : 0;
  return (record.periods[key] ?? 0) + current;
}

/**
 * Charge a new window's first report (closing the window before it); `sent` is the report's bits.
 * Throws (nothing charged) when the ceiling would be passed or the charge cannot be proven.
 */
export function chargeNewWindow(
  record: MetricRecord, params: MetricParams, ceiling: Ceiling, window: number, value: string, sent: string,
): void {
  const micro = windowMicro(params, [record.level], [record.irr], []);
  const before = spentFor(record, window, ceiling);
  if (passes(roundUpSum(before, micro), ceiling)) {
    throw new BudgetExceeded(fromMicro(micro), remaining(ceiling, before),
      `metric '${params.name}': a report in a new window costs ${fromMicro(micro)}`);
  }
  closeWindow(record, ceiling);
  record.current = { window, value, levels: [record.level], irrs: [record.irr], relaxed: [], sent, micro };
}

/** Close the current window's release once its window has passed (`window` is now's): it is never re-sent. */
export function settle(record: MetricRecord, ceiling: Ceiling, window: number): void {
  if (record.current && record.current.window < window) closeWindow(record, ceiling);
}

function closeWindow(record: MetricRecord, ceiling: Ceiling): void {
  const c = record.current;
  if (!c) return;
  record.closed += c.micro;
  const key = periodOf(c.window, ceiling.period);
  record.periods = { [key]: (record.periods[key] ?? 0) + c.micro };
  record.current = null;
}

/**
 * Whether a round's re-send is drawn from the window's last report by the relaxed IRR step (else a
 * fresh IRR): when the round sets an IRR, that report was kept, and the window costs no more so.
 */
export function resendRelaxed(record: MetricRecord, params: MetricParams, levelTo: number, irr: Irr | null): boolean {
  const c = record.current;
  if (irr === null || !c || c.sent === null) return false;
  const cost = (flag: boolean) => windowMicro(params, [...c.levels, levelTo], [...c.irrs, irr], [...c.relaxed, flag]);
  return cost(true) <= cost(false);
}

/**
 * Move the metric to `levelTo` and the IRR `irr` (null: kept) for round `roundId`, the current
 * window's re-send `relaxed` or fresh; returns the micro-epsilons the re-send adds (0 without a
 * current window). Throws when it lowers the level, passes the ceiling or cannot be proven
 * (nothing changes then).
 */
export function chargeRelaxation(
  record: MetricRecord, params: MetricParams, ceiling: Ceiling, levelTo: number, roundId: number,
  irr: Irr | null = null, relaxed = false,
): number {
  if (levelTo < record.level) throw new TighteningRefused(record.level, levelTo);
  const after = irr ?? record.irr;
  const c = record.current;
  let extra = 0;
  if (c) {
    const total = windowMicro(params, [...c.levels, levelTo], [...c.irrs, after], [...c.relaxed, relaxed]);
    // As client_sdk.ledger.check_relaxation: the extra is round_up(after - spent) of the printed totals.
    extra = microCeil(fromMicro(record.closed + total) - fromMicro(record.closed + c.micro));
    const before = spentFor(record, c.window, ceiling);
    const decided = ceiling.period === null ? record.closed + total : roundUpSum(before, extra);
    if (passes(decided, ceiling)) {
      throw new BudgetExceeded(fromMicro(extra), remaining(ceiling, before),
        `metric '${params.name}': relaxing to level ${levelTo}`);
    }
    c.levels.push(levelTo);
    c.irrs.push(after);
    c.relaxed.push(relaxed);
    c.micro = total;
  }
  record.level = levelTo;
  record.irr = after;
  record.round = roundId;
  return extra;
}

/** What a metric has spent and has left (the app's view). */
export interface Budget {
  metric: string;
  spent: number;
  ceiling: number;
  remaining: number;
  level: number;
  round: number;
}

export function budgetOf(name: string, record: MetricRecord, ceiling: Ceiling, now: number): Budget {
  const spent = spentFor(record, now, ceiling);
  return { metric: name, spent: fromMicro(spent), ceiling: ceiling.epsilon, remaining: remaining(ceiling, spent),
    level: record.level, round: record.round };
}
