/**
 * The privacy ledger: what one window of reports costs, to the micro-epsilon, as the Python client
 * charges it (`client_sdk.ledger.window_cost`), and the records that keep a metric within its
 * ceiling (one value per window, lifetime or renewing budgets, no tightening).
 *
 * Charges this client computes itself: a window's first report in every mode, with or without
 * IRR, and asymmetric relaxation chains without IRR (exactly `k * L_last / 2`). The reference
 * charges other chains (symmetric relaxations, IRR report chains) at the upper end of enclosures
 * this port does not carry; such a chain is refused ({@link ChargeUnproven}), never guessed, and a
 * round that needs it is not joined (the aggregator sees non-participation).
 *
 * A charge computed with `Math.log`/`Math.exp` is accepted only when every double within a relative
 * 1e-12 of it rounds up to the same micro-epsilon, so libm differences between JavaScript engines
 * and the reference cannot change it; otherwise it is refused too.
 */

import { BudgetExceeded, ChargeUnproven, TighteningRefused } from "./errors.js";
import { Rational } from "./exact.js";
import { distinctLevels } from "./noise.js";
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
  throw new ChargeUnproven("a symmetric relaxation chain is charged by an enclosure this client does not carry");
}

/**
 * Micro-epsilons one window costs: a report at each of `levels`, with the IRR `irrs[i]` (null: the
 * metric's), `relaxed[i]` when report `i + 1` was drawn from report `i` by the relaxed IRR step.
 *
 * @throws ChargeUnproven where the reference charges an enclosure this port does not carry.
 */
export function windowMicro(
  params: MetricParams, levels: number[], irrs: (Irr | null)[] = levels.map(() => null), relaxed: boolean[] = [],
): number {
  // A pure function of public parameters, remembered: every new window asks it (exact arithmetic, ~30 us).
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
  const chain = bitsChanged(params) * bitMicro(params, distinctLevels(levels));
  const steps = irrs.map((irr) => withIrr(params, irr));
  if (steps.every((s) => s.irr_q === null)) return chain;
  if (levels.length === 1) {
    return Math.min(chain, provenMicro(reportEpsilon(steps[0], levels[0]), "one report's epsilon"));
  }
  void relaxed;
  throw new ChargeUnproven("a window of several reports with IRR is charged by an enclosure this client does not carry");
}

export const fromMicro = (micro: number): number => (micro === Infinity ? Infinity : micro / 1_000_000);

/** The one value a metric released in its current window. */
export interface WindowRelease {
  window: number;
  /** base64url of the canonical value. */
  value: string;
  /** The window's chain of levels and IRRs (its first report, then each round's re-send). */
  levels: number[];
  irrs: (Irr | null)[];
  /** Micro-epsilons charged for the window so far. */
  micro: number;
}

export interface MetricRecord {
  digest: string;
  cohort: number;
  /** The level and round reports are made at now. */
  level: number;
  round: number;
  /** Micro-epsilons of windows closed, and of each budget period (renewing budgets). */
  closed: number;
  periods: Record<string, number>;
  current: WindowRelease | null;
}

export function newRecord(params: MetricParams, digest: string, cohort: number): MetricRecord {
  return { digest, cohort, level: params.level, round: 0, closed: 0, periods: {}, current: null };
}

/** A metric's ceiling: lifetime, or per period (seconds, aligned to the Unix epoch). */
export interface Ceiling {
  micro: number;
  period: number | null;
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
 * Charge a new window's first report (closing the window before it). Throws (nothing charged)
 * when the ceiling would be passed or the charge cannot be proven.
 */
export function chargeNewWindow(
  record: MetricRecord, params: MetricParams, ceiling: Ceiling, window: number, value: string,
): void {
  const micro = windowMicro(params, [record.level]);
  const before = spentFor(record, window, ceiling);
  if (before + micro > ceiling.micro) {
    throw new BudgetExceeded(fromMicro(micro), fromMicro(Math.max(0, ceiling.micro - before)),
      `metric '${params.name}': a report in a new window costs ${fromMicro(micro)}`);
  }
  closeWindow(record, ceiling);
  record.current = { window, value, levels: [record.level], irrs: [[params.irr_p, params.irr_q]], micro };
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
 * Move the metric to `levelTo` for round `roundId`; returns the micro-epsilons the current window's
 * re-send adds (0 without a current window). Throws when it lowers the level, passes the ceiling or
 * cannot be proven (nothing changes then).
 */
export function chargeRelaxation(
  record: MetricRecord, params: MetricParams, ceiling: Ceiling, levelTo: number, roundId: number,
): number {
  if (levelTo < record.level) throw new TighteningRefused(record.level, levelTo);
  const c = record.current;
  let extra = 0;
  if (c) {
    const after = windowMicro(params, [...c.levels, levelTo], [...c.irrs, null]);
    extra = after - c.micro;
    const before = spentFor(record, c.window, ceiling);
    if (before + extra > ceiling.micro) {
      throw new BudgetExceeded(fromMicro(extra), fromMicro(Math.max(0, ceiling.micro - before)),
        `metric '${params.name}': relaxing to level ${levelTo}`);
    }
    c.levels.push(levelTo);
    c.irrs.push(null);
    c.micro = after;
  }
  record.level = levelTo;
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
  return { metric: name, spent: fromMicro(spent), ceiling: fromMicro(ceiling.micro),
    remaining: fromMicro(Math.max(0, ceiling.micro - spent)), level: record.level, round: record.round };
}
