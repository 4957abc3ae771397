/**
 * Exact rationals (BigInt) and the exact Bernoulli sampler of the reference
 * (`protocol.exact.bernoulli_choose`): bit `i` is `[X_i < p]` with `X_i = 0.U_1 U_2 ...` read byte
 * by byte against the base-256 expansion of `p`. Every element takes one byte; the ties (a byte
 * equal to `p`'s digit), in ascending order, take one more byte each at the next depth, until none
 * ties. The same bytes give the same bits as the reference, and the probability is exact.
 */

import { ParameterError } from "./errors.js";

export class Rational {
  readonly num: bigint;
  readonly den: bigint;

  constructor(num: bigint, den: bigint = 1n) {
    if (den === 0n) throw new ParameterError("rational", "zero denominator");
    if (den < 0n) {
      num = -num;
      den = -den;
    }
    const g = gcd(num < 0n ? -num : num, den);
    this.num = num / g;
    this.den = den / g;
  }

  /** The exact value of a finite double. */
  static of(x: number): Rational {
    if (!Number.isFinite(x)) throw new ParameterError("p", `must be finite, got ${x}`);
    if (x === 0) return new Rational(0n);
    const view = new DataView(new ArrayBuffer(8));
    view.setFloat64(0, x);
    const bits = view.getBigUint64(0);
    const sign = bits >> 63n ? -1n : 1n;
    const exp = Number((bits >> 52n) & 0x7ffn);
    let mant = bits & ((1n << 52n) - 1n);
    let e = exp - 1075;
    if (exp === 0) e = -1074;
    else mant |= 1n << 52n;
    return e >= 0 ? new Rational(sign * (mant << BigInt(e))) : new Rational(sign * mant, 1n << BigInt(-e));
  }

  add(o: Rational): Rational {
    return new Rational(this.num * o.den + o.num * this.den, this.den * o.den);
  }

  sub(o: Rational): Rational {
    return new Rational(this.num * o.den - o.num * this.den, this.den * o.den);
  }

  mul(o: Rational): Rational {
    return new Rational(this.num * o.num, this.den * o.den);
  }

  div(o: Rational): Rational {
    return new Rational(this.num * o.den, this.den * o.num);
  }

  cmp(o: Rational): number {
    const d = this.num * o.den - o.num * this.den;
    return d < 0n ? -1 : d > 0n ? 1 : 0;
  }

  isZero(): boolean {
    return this.num === 0n;
  }
}

function gcd(a: bigint, b: bigint): bigint {
  while (b) [a, b] = [b, a % b];
  return a === 0n ? 1n : a;
}

export const ZERO = new Rational(0n);
export const ONE = new Rational(1n);

/** Byte `depth` (0 = first) of the base-256 expansion of `p` in [0, 1]; `1 = 0.FFFF...`. */
export function expansionDigit(p: Rational, depth: number): number {
  if (p.cmp(ONE) === 0) return 255;
  return Number(((p.num << BigInt(8 * (depth + 1))) / p.den) % 256n);
}

/**
 * Bits True with probability `probabilities[choice[i] + upper[i] * half]` exactly (`upper` null:
 * `probabilities[choice[i]]`), from `bytes` (called once for the first bytes, then once per depth
 * with the number of ties).
 */
export function bernoulliChoose(
  bytes: (n: number) => Uint8Array, probabilities: Rational[], choice: Uint8Array, upper: Uint8Array | null,
): Uint8Array {
  for (const p of probabilities) {
    if (p.cmp(ZERO) < 0 || p.cmp(ONE) > 0) throw new ParameterError("p", "must be in [0, 1]");
  }
  const half = upper === null ? probabilities.length : probabilities.length / 2;
  const which = (i: number) => {
    if (choice[i] >= half) throw new ParameterError("choice", `must index the ${half} probabilities`);
    return choice[i] + (upper === null ? 0 : upper[i] * half);
  };
  const n = choice.length;
  const out = new Uint8Array(n);
  const first = bytes(n);
  let tied: number[] = [];
  for (let i = 0; i < n; i++) {
    const cut = expansionDigit(probabilities[which(i)], 0);
    out[i] = first[i] < cut ? 1 : 0;
    if (first[i] === cut) tied.push(i);
  }
  for (let depth = 1; tied.length; depth++) {
    const u = bytes(tied.length);
    const next: number[] = [];
    tied.forEach((i, t) => {
      const cut = expansionDigit(probabilities[which(i)], depth);
      out[i] = u[t] < cut ? 1 : 0;
      if (u[t] === cut) next.push(i);
    });
    tied = next;
  }
  return out;
}
