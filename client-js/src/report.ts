/**
 * One report, from a value to its payload (docs/wire.md 2-4; the reference is
 * `client_sdk.memo.ReportPlan`): encode, memoized noise through the window's chain, IRR, pack.
 */

import { concat, u16be, u8 } from "./bytes.js";
import { canonicalValue, memberIndexer, members, Value, valueBytes } from "./encodings.js";
import { ParameterError } from "./errors.js";
import { relaxInstantaneous, applyIrr } from "./irr.js";
import { distinctLevels, noiseKey, permanentBits } from "./noise.js";
import { MetricParams } from "./params.js";

export const PAYLOAD_VERSION = 1;
export const PAYLOAD_HEADER_BYTES = 11;

/** `u8 1 || u16be cohort || f64be level` (docs/wire.md 4). */
export function payloadHeader(cohort: number, level: number): Uint8Array {
  if (!Number.isInteger(cohort) || cohort < 0 || cohort > 65535) {
    throw new ParameterError("payload.cohort", "must be in [0, 65535]");
  }
  if (!(level > 0)) throw new ParameterError("payload.level", "must be > 0");
  const f = new Uint8Array(8);
  new DataView(f.buffer).setFloat64(0, level);
  return concat(u8(PAYLOAD_VERSION), u16be(cohort), f);
}

/** Bits packed LSB first: bit `i` is bit `i mod 8` of byte `floor(i / 8)`. */
export function packBits(bits: Uint8Array): Uint8Array {
  const out = new Uint8Array((bits.length + 7) >> 3);
  bits.forEach((b, i) => {
    if (b) out[i >> 3] |= 1 << (i & 7);
  });
  return out;
}

export function unpackBits(packed: Uint8Array, numBits: number): Uint8Array {
  const out = new Uint8Array(numBits);
  for (let i = 0; i < numBits; i++) out[i] = (packed[i >> 3] >> (i & 7)) & 1;
  return out;
}

/** The true bits of a value or a set in `cohort` (the declared none value owns no bits). */
export function encodeValue(params: MetricParams, valueOrSet: Value | Iterable<Value>, cohort: number): Uint8Array {
  const indices = memberIndexer(params.encoding, cohort);
  const bits = new Uint8Array(params.num_bits);
  if (typeof valueOrSet === "string" || valueOrSet instanceof Uint8Array) {
    const data = valueBytes(valueOrSet);
    if (params.none_value !== null && new TextDecoder().decode(data) === params.none_value) return bits;
    for (const i of indices(data)) bits[i] = 1;
    return bits;
  }
  for (const m of members(valueOrSet)) for (const i of indices(m)) bits[i] = 1;
  return bits;
}

/** What a window's reports share: the metric (with the IRR it reports with), the secret, cohort, window, value. */
export interface WindowValue {
  secret: Uint8Array;
  params: MetricParams;
  cohort: number;
  window: number;
  value: Value | Iterable<Value>;
}

function memoKey(w: WindowValue): Uint8Array {
  return noiseKey(w.window, canonicalValue(w.value));
}

/**
 * The payload of a window's first report (`chain` of one level) or of a round's re-send with a
 * fresh IRR (`chain`: the window's levels through the round's), the IRR drawn from `uniforms`
 * (one per bit).
 */
export function reportPayload(w: WindowValue, chain: readonly number[], uniforms: Float64Array): Uint8Array {
  const bits = encodeValue(w.params, w.value, w.cohort);
  const permanent = permanentBits(w.secret, w.params, bits, memoKey(w), chain);
  const level = chain[chain.length - 1];
  return concat(payloadHeader(w.cohort, level), packBits(applyIrr(w.params, permanent, uniforms)));
}

/**
 * A round's re-send whose IRR is drawn from the window's last report (`sent`, its bits as sent;
 * `before`: the parameters it was made with, at the chain's previous level).
 */
export function relaxedPayload(
  w: WindowValue, chain: readonly number[], sent: Uint8Array, before: MetricParams, bytes: (n: number) => Uint8Array,
): Uint8Array {
  if (chain.length < 2) throw new ParameterError("chain", "a relaxed re-send follows a report: two levels at least");
  const bits = encodeValue(w.params, w.value, w.cohort);
  const key = memoKey(w);
  const now = permanentBits(w.secret, w.params, bits, key, chain);
  const earlier = distinctLevels(chain.slice(0, -1));
  const previous = earlier.length === distinctLevels(chain).length ? now
    : permanentBits(w.secret, w.params, bits, key, earlier);
  const drawn = relaxInstantaneous(now, sent, previous, before, w.params, bytes);
  return concat(payloadHeader(w.cohort, chain[chain.length - 1]), packBits(drawn));
}
