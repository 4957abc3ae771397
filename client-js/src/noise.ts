/**
 * Keyed memoized noise (docs/wire.md 3; the reference is `client_sdk/memo.py`).
 *
 * The noise behind a window's permanent bits is re-derived from the client secret: step `s` of a
 * value's chain reads `SHAKE-256(HMAC-SHA256(secret, "onesided/noise/v1" || len32(metric) ||
 * metric || len32(key) || key || u32be(s)))` as uniforms. Step 0 draws the noise at the first
 * level (exponential or Laplace, by inversion); each later step relaxes it lazily
 * (gradual-release paper, Algorithm 1; the exponential minimum). The permanent bits are
 * `[b + V > 1/2]`. Nothing here leaves the device.
 */

import { hmac } from "@noble/hashes/hmac";
import { sha256 } from "@noble/hashes/sha2";
import { shake256 } from "@noble/hashes/sha3";
import { concat, field32, u32be, u64be, utf8 } from "./bytes.js";
import { ParameterError } from "./errors.js";
import { MetricParams } from "./params.js";
import { wordsToUniforms } from "./random.js";

export const NOISE_LABEL = utf8("onesided/noise/v1");

export function noiseMessage(metric: string, key: Uint8Array, step: number): Uint8Array {
  return concat(NOISE_LABEL, field32(utf8(metric)), field32(key), u32be(step));
}

export function noiseSeed(secret: Uint8Array, metric: string, key: Uint8Array, step: number): Uint8Array {
  return hmac(sha256, secret, noiseMessage(metric, key, step));
}

/** The first `n` uniforms of the keyed stream of `seed`. */
export function keyedUniforms(seed: Uint8Array, n: number): Float64Array {
  return wordsToUniforms(shake256(seed, { dkLen: 8 * n }), n);
}

/** The memoization key of a value in a window: `"W" || u64be(window) || canonical value`. */
export function noiseKey(window: number, valueKey: Uint8Array): Uint8Array {
  return concat(utf8("W"), u64be(window), valueKey);
}

/** A window's chain without the repeats of IRR-only rounds (a repeated level is no lazy step). */
export function distinctLevels(chain: readonly number[]): number[] {
  return chain.filter((v, i) => i === 0 || v !== chain[i - 1]);
}

/** Fresh noise at `level` from uniforms (inversion, one uniform per bit). */
export function drawNoise(params: MetricParams, level: number, u: Float64Array): Float64Array {
  const out = new Float64Array(u.length);
  if (params.mode === "asymmetric") {
    for (let j = 0; j < u.length; j++) out[j] = -Math.log(u[j]) / level;
  } else if (params.mode === "symmetric") {
    for (let j = 0; j < u.length; j++) {
      const v = u[j] - 0.5;
      out[j] = (-Math.sign(v) * Math.log1p(-2 * Math.abs(v))) / level;
    }
  }
  return out;
}

/** RelaxPrivacy (Algorithm 1): Laplace noise at `e1` to `e2`, two uniform arrays (case, draw). */
export function relaxLaplace(x: Float64Array, e1: number, e2: number, u: Float64Array): Float64Array {
  const m = x.length;
  if (e2 === Infinity) return new Float64Array(m);
  if (e2 === e1) return x.slice();
  const r = e2 - e1;
  const s = e1 + e2;
  const out = x.slice();
  for (let j = 0; j < m; j++) {
    const uc = u[j];
    const ud = u[m + j];
    const ax = Math.abs(x[j]);
    const decay = Math.exp(ax * -r);
    const t1 = decay * (e1 / e2);
    const t2 = t1 + r / (2 * e2);
    const t3 = t2 + (1.0 - decay) * (s / (2 * e2));
    const kind = (uc >= t1 ? 1 : 0) + (uc >= t2 ? 1 : 0) + (uc >= t3 ? 1 : 0);
    let z = x[j];
    if (kind === 1) z = Math.log(ud) / s;
    else if (kind === 2) z = -Math.log1p(ud * Math.expm1(-r * ax)) / r;
    else if (kind === 3) z = ax - Math.log(ud) / s;
    out[j] = kind > 0 && x[j] < 0 ? -z : z;
  }
  return out;
}

/** `min(V, E)` with `E ~ Exp(l2 - l1)`: exponential noise at `l1` to `l2`, one uniform per bit. */
export function relaxExponential(x: Float64Array, l1: number, l2: number, u: Float64Array): Float64Array {
  const m = x.length;
  if (l2 === Infinity) return new Float64Array(m);
  if (l2 === l1) return x.slice();
  const out = new Float64Array(m);
  for (let j = 0; j < m; j++) out[j] = Math.min(x[j], -Math.log(u[j]) / (l2 - l1));
  return out;
}

/** The memoized noise after the chain `levels` (strictly increasing; `levels[0]` the first draw). */
export function memoizedNoise(
  secret: Uint8Array, params: MetricParams, key: Uint8Array, levels: readonly number[],
): Float64Array {
  if (!levels.length) throw new ParameterError("levels", "must hold at least the initial level");
  for (let i = 1; i < levels.length; i++) {
    if (!(levels[i] > levels[i - 1])) throw new ParameterError("levels", "must be strictly increasing");
  }
  const m = params.num_bits;
  let noise = drawNoise(params, levels[0], keyedUniforms(noiseSeed(secret, params.name, key, 0), m));
  for (let step = 1; step < levels.length; step++) {
    const seed = noiseSeed(secret, params.name, key, step);
    noise = params.mode === "symmetric"
      ? relaxLaplace(noise, levels[step - 1], levels[step], keyedUniforms(seed, 2 * m))
      : relaxExponential(noise, levels[step - 1], levels[step], keyedUniforms(seed, m));
  }
  return noise;
}

/** The permanent bits `[b + V > 1/2]` of the encoded bits after the window's chain (repeats dropped). */
export function permanentBits(
  secret: Uint8Array, params: MetricParams, bits: Uint8Array, key: Uint8Array, chain: readonly number[],
): Uint8Array {
  if (params.mode === "trusted") return bits.slice();
  const noise = memoizedNoise(secret, params, key, distinctLevels(chain));
  const out = new Uint8Array(bits.length);
  for (let j = 0; j < bits.length; j++) out[j] = bits[j] + noise[j] > 0.5 ? 1 : 0;
  return out;
}
