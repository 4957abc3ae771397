/**
 * Proven enclosures in IEEE doubles (the reference is `protocol.laplace_chain_rigorous`): interval
 * arithmetic with every operation stepped one double outward (+, -, *, / are correctly rounded, so
 * the step encloses the exact value), exponentials enclosed in exact integer arithmetic (never the
 * engine's `Math.exp`), logarithms checked against those exponentials. Used by the ledger to charge
 * relaxation chains exactly as the reference does.
 */

import { ParameterError } from "./errors.js";
import { Rational } from "./exact.js";

const view = new DataView(new ArrayBuffer(8));

/** The next double towards +infinity (`math.nextafter(x, inf)`). */
export function nextUp(x: number): number {
  if (Number.isNaN(x) || x === Infinity) return x;
  if (x === 0) return Number.MIN_VALUE;
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  view.setBigUint64(0, x > 0 ? bits + 1n : bits - 1n);
  return view.getFloat64(0);
}

/** The next double towards -infinity. */
export function nextDown(x: number): number {
  return -nextUp(-x);
}

/** The double nearest to `num / den` (`den > 0`), ties to even: `float(Fraction(num, den))`. */
function nearest(num: bigint, den: bigint): number {
  if (num === 0n) return 0;
  const negative = num < 0n;
  const n = negative ? -num : num;
  // Scale so the quotient has at least 66 bits, then fold the remainder into a sticky bit.
  const shift = Math.max(0, 66 - (n.toString(2).length - den.toString(2).length));
  const q = (n << BigInt(shift)) / den;
  const sticky = (n << BigInt(shift)) % den === 0n ? 0n : 1n;
  const scaled = Number((q << 1n) | sticky);
  const exponent = shift + 1; // two exact steps, so 2^-exponent never underflows on its own
  const value = exponent > 1000 ? scaled * 2 ** -1000 * 2 ** -(exponent - 1000) : scaled / 2 ** exponent;
  return negative ? -value : value;
}

/** A double on the given side of the rational `r` (the nearest one when it already is). */
export function toDouble(r: Rational, upward: boolean): number {
  const value = nearest(r.num, r.den);
  const c = Rational.of(value).cmp(r);
  if (upward && c < 0) return nextUp(value);
  if (!upward && c > 0) return nextDown(value);
  return value;
}

const EXP_BITS = 256n;
const EXP_TERMS = 16;
const expCache = new Map<number, [number, number]>();

/** Doubles `lo <= e^x <= hi` for a double `|x| <= 700`, in exact integer arithmetic. */
export function enclosedExp(x: number): [number, number] {
  const cached = expCache.get(x);
  if (cached) return cached;
  if (!(Math.abs(x) <= 700)) throw new ParameterError("levels", `exponent ${x} out of the enclosed range (|x| <= 700)`);
  let t = Rational.of(x);
  let s = 0;
  const small = new Rational(1n, 256n);
  const abs = (r: Rational) => (r.num < 0n ? new Rational(-r.num, r.den) : r);
  while (abs(t).cmp(small) > 0) {
    t = t.div(new Rational(2n));
    s++;
  }
  let total = new Rational(0n);
  let term = new Rational(1n);
  for (let k = 0; k < EXP_TERMS; k++) {
    total = total.add(term);
    term = term.mul(t).div(new Rational(BigInt(k + 1)));
  }
  const remainder = abs(term).mul(new Rational(2n));
  const scale = 1n << EXP_BITS;
  const floorOf = (r: Rational) => {
    const q = r.num / r.den;
    return r.num < 0n && q * r.den !== r.num ? q - 1n : q;
  };
  let low = floorOf(total.sub(remainder).mul(new Rational(scale)));
  const upper = total.add(remainder).mul(new Rational(scale));
  let high = -floorOf(new Rational(-upper.num, upper.den));
  for (let i = 0; i < s; i++) {
    low = (low * low) >> EXP_BITS;
    high = -((-high * high) >> EXP_BITS);
  }
  const out: [number, number] = [toDouble(new Rational(low, scale), false), toDouble(new Rational(high, scale), true)];
  if (expCache.size > 4096) expCache.clear();
  expCache.set(x, out);
  return out;
}

/** A closed interval of doubles with outward-rounded arithmetic. */
export class Interval {
  constructor(readonly lo: number, readonly hi: number = lo) {}

  add(o: Interval): Interval {
    return new Interval(nextDown(this.lo + o.lo), nextUp(this.hi + o.hi));
  }

  sub(o: Interval): Interval {
    return new Interval(nextDown(this.lo - o.hi), nextUp(this.hi - o.lo));
  }

  neg(): Interval {
    return new Interval(-this.hi, -this.lo);
  }

  mul(o: Interval | number): Interval {
    const b = typeof o === "number" ? new Interval(o) : o;
    const ends = [this.lo * b.lo, this.lo * b.hi, this.hi * b.lo, this.hi * b.hi];
    return new Interval(nextDown(Math.min(...ends)), nextUp(Math.max(...ends)));
  }

  div(o: Interval | number): Interval {
    const b = typeof o === "number" ? new Interval(o) : o;
    if (b.lo <= 0 && 0 <= b.hi) throw new RangeError("interval divisor contains 0");
    const ends = [this.lo / b.lo, this.lo / b.hi, this.hi / b.lo, this.hi / b.hi];
    return new Interval(nextDown(Math.min(...ends)), nextUp(Math.max(...ends)));
  }

  exp(): Interval {
    return new Interval(enclosedExp(this.lo)[0], enclosedExp(this.hi)[1]);
  }
}

/** Doubles around `ln x` for every `x` in `[low, high]`, `1 <= low <= high` (`high` may be infinite). */
export function enclosedLog(low: number, high: number): [number, number] {
  if (!(1 <= low && low <= high)) throw new ParameterError("ratio", `must satisfy 1 <= low <= high, got [${low}, ${high}]`);
  let lo = Math.min(Math.log(low), 700);
  while (lo > 0 && enclosedExp(lo)[1] > low) lo = Math.max(nextDown(lo), 0);
  if (high === Infinity || Math.log(high) >= 699) return [lo, Infinity];
  let hi = Math.log(high);
  while (enclosedExp(hi)[0] < high) hi = nextUp(hi);
  return [lo, hi];
}

// --- the symmetric (Laplace) chain's pattern probabilities in closed form --------------------------

type Piece = Map<number, Interval>; // exponent key (0, +j, -j) -> coefficient
type Pieces = [Piece, Piece, Piece]; // (-inf, 0], (0, 1/2], (1/2, inf)

class Chain {
  readonly rate: Interval[];
  readonly half = new Interval(1).div(2);
  private readonly cache = new Map<string, Interval>();

  constructor(levels: number[]) {
    this.rate = levels.map((v) => new Interval(v));
  }

  lam(key: number): Interval {
    return key === 0 ? new Interval(0) : key > 0 ? this.rate[key - 1] : this.rate[-key - 1].neg();
  }

  expHalf(key: number, shift: number): Interval {
    const k = `${key},${shift}`;
    let v = this.cache.get(k);
    if (!v) {
      v = this.lam(key).add(this.lam(shift)).mul(this.half).exp();
      this.cache.set(k, v);
    }
    return v;
  }

  antiderivatives(piece: Piece, j: number): [Interval, Interval, Interval, Interval] {
    const zero = new Interval(0);
    let [p0, pHalf, m0, mHalf] = [zero, zero, zero, zero];
    for (const [key, coef] of piece) {
      const plus = coef.div(this.lam(key).add(this.rate[j - 1]));
      const minus = coef.div(this.lam(key).sub(this.rate[j - 1]));
      p0 = p0.add(plus);
      pHalf = pHalf.add(plus.mul(this.expHalf(key, j)));
      m0 = m0.add(minus);
      mHalf = mHalf.add(minus.mul(this.expHalf(key, -j)));
    }
    return [p0, pHalf, m0, mHalf];
  }

  step(f: Pieces, j: number, bit: number): Pieces {
    const a = this.rate[j - 1];
    const b = this.rate[j];
    const c = b.mul(b).sub(a.mul(a)).div(b.mul(2));
    const [left, middle, right] = f.map((piece) => this.antiderivatives(piece, j));
    const aLeft = left[0];
    const aMiddle = middle[1].sub(middle[0]);
    const bMiddle = middle[3].sub(middle[2]);
    const bRight = right[3].neg();
    if (bit) {
      return [new Map(), new Map(), this.rescale(f[2], a, b, c, new Map([[-j, c.mul(aLeft.add(aMiddle).sub(right[1]))]]))];
    }
    const outLeft = this.rescale(f[0], a, b, c, new Map([[j, c.mul(bMiddle.add(bRight).add(left[2]))]]));
    const outMiddle = this.rescale(f[1], a, b, c, new Map([[-j, c.mul(aLeft.sub(middle[0]))], [j, c.mul(bRight.add(middle[3]))]]));
    return [outLeft, outMiddle, new Map()];
  }

  private rescale(piece: Piece, a: Interval, b: Interval, c: Interval, extra: Piece): Piece {
    const out = new Map(extra);
    for (const [key, coef] of piece) {
      const lam = this.lam(key);
      out.set(key, coef.mul(a.div(b).add(a.mul(2).mul(c).div(a.sub(lam).mul(a.add(lam))))));
    }
    return out;
  }

  mass(f: Pieces, j: number): Interval {
    const [left, middle, right] = f.map((piece) => this.antiderivatives(piece, j));
    return left[0].add(middle[3].sub(middle[2])).sub(right[3]);
  }
}

/** `P0(pattern)` of every pattern as intervals, patterns sorted (as tuples of bits). */
function patternIntervals(levels: number[]): Map<string, Interval> {
  const chain = new Chain(levels);
  const n = levels.length;
  const first = chain.rate[0].div(2);
  const out = new Map<string, Interval>();
  const stack: [number[], Pieces][] = [
    [[1], [new Map(), new Map(), new Map([[0, first]])]],
    [[0], [new Map([[0, first]]), new Map([[0, first]]), new Map()]],
  ];
  while (stack.length) {
    const [prefix, f] = stack.pop() as [number[], Pieces];
    if (prefix.length === n) {
      out.set(prefix.join(""), chain.mass(f, n));
      continue;
    }
    for (const bit of [1, 0]) stack.push([[...prefix, bit], chain.step(f, prefix.length, bit)]);
  }
  return new Map([...out.entries()].sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0)));
}

const complement = (pattern: string) => pattern.replace(/[01]/g, (b) => (b === "0" ? "1" : "0"));

/** `(lo, hi)` around the epsilon of a symmetric bit released at `levels` (strictly increasing). */
export function enclosedSequenceEpsilon(levels: number[]): [number, number] {
  let probs: Map<string, Interval>;
  try {
    probs = patternIntervals(levels);
  } catch (e) {
    if (e instanceof RangeError) return [0, Infinity];
    throw e;
  }
  let ratioLo = 1;
  let ratioHi = 1;
  for (const [pattern, p0] of probs) {
    const p1 = probs.get(complement(pattern)) as Interval;
    if (!(p0.lo > 0 && p1.lo > 0)) return [0, Infinity];
    const ratio = p1.div(p0);
    ratioLo = Math.max(ratioLo, ratio.lo);
    ratioHi = Math.max(ratioHi, ratio.hi);
  }
  let lo = Math.log(ratioLo);
  let hi = Math.log(ratioHi);
  while (lo > 0 && enclosedExp(lo)[1] > ratioLo) lo = Math.max(nextDown(lo), 0);
  while (enclosedExp(hi)[0] < ratioHi) hi = nextUp(hi);
  return [lo, hi];
}

/** `P0(pattern)` of every pattern as `[lo, hi]` (`lo >= 0`), or null where doubles give no bound. */
export function enclosedPatternProbabilities(levels: number[]): Map<string, [number, number]> | null {
  let probs: Map<string, Interval>;
  try {
    probs = patternIntervals(levels);
  } catch (e) {
    if (e instanceof RangeError || e instanceof ParameterError) return null;
    throw e;
  }
  return new Map([...probs].map(([k, p]) => [k, [Math.max(p.lo, 0), p.hi]]));
}

export { complement };
