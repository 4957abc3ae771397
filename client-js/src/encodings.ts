/**
 * Encodings of a value or a set as bits (docs/wire.md 2): Bloom filters (mmh3 or RAPPOR's MD5, with
 * cohorts), direct (unary over a declared domain; pairs are `a + "\x1f" + b`), prefix Bloom
 * filters, and the canonical value that keys memoized noise.
 */

import { md5 } from "@noble/hashes/legacy";
import { compareBytes, concat, u32be, utf8 } from "./bytes.js";
import { ParameterError } from "./errors.js";

export type Value = string | Uint8Array;
export type Encoding =
  | { kind: "bloom"; num_bits: number; num_hashes: number; num_cohorts: number; hashing: "mmh3" | "rappor-md5" }
  | { kind: "direct"; domain: string[] }
  | { kind: "prefix"; num_bits: number; num_hashes: number; lengths: number[] };

/** MurmurHash3 x86 32-bit, unsigned (as `mmh3.hash(data, seed, signed=False)`). */
export function murmur3(data: Uint8Array, seed: number): number {
  const c1 = 0xcc9e2d51;
  const c2 = 0x1b873593;
  let h = seed >>> 0;
  const blocks = data.length >>> 2;
  for (let i = 0; i < blocks; i++) {
    const j = 4 * i;
    let k = data[j] | (data[j + 1] << 8) | (data[j + 2] << 16) | (data[j + 3] << 24);
    k = Math.imul(k, c1);
    k = (k << 15) | (k >>> 17);
    k = Math.imul(k, c2);
    h ^= k;
    h = (h << 13) | (h >>> 19);
    h = (Math.imul(h, 5) + 0xe6546b64) | 0;
  }
  const tail = 4 * blocks;
  let k = 0;
  switch (data.length & 3) {
    case 3:
      k ^= data[tail + 2] << 16;
    // falls through
    case 2:
      k ^= data[tail + 1] << 8;
    // falls through
    case 1:
      k ^= data[tail];
      k = Math.imul(k, c1);
      k = (k << 15) | (k >>> 17);
      k = Math.imul(k, c2);
      h ^= k;
  }
  h ^= data.length;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

export function valueBytes(value: Value): Uint8Array {
  if (typeof value === "string") return utf8(value);
  if (value instanceof Uint8Array) return value;
  throw new ParameterError("value", `must be a string or bytes, got ${typeof value}`);
}

/** Bloom indices of one value in one cohort (docs/wire.md 2.1); indices may repeat. */
export function bloomBits(
  data: Uint8Array, cohort: number, numBits: number, numHashes: number, hashing: "mmh3" | "rappor-md5",
): number[] {
  const out: number[] = [];
  if (hashing === "mmh3") {
    for (let i = 0; i < numHashes; i++) out.push(murmur3(data, cohort * numHashes + i) % numBits);
    return out;
  }
  const digest = md5(concat(u32be(cohort), data));
  for (let i = 0; i < numHashes; i++) out.push(digest[i] % numBits);
  return out;
}

export const PREFIX_END = 0;

/** The first `length` bytes of `value || 0x00`: what a prefix cohort encodes. */
export function prefixOf(data: Uint8Array, length: number): Uint8Array {
  if (data.includes(PREFIX_END)) {
    throw new ParameterError("value", "must not contain the byte 0x00 (the prefix encoding's end marker)");
  }
  return concat(data, Uint8Array.of(PREFIX_END)).slice(0, length);
}

export function encodingBits(encoding: Encoding): number {
  return encoding.kind === "direct" ? encoding.domain.length : encoding.num_bits;
}

export function encodingCohorts(encoding: Encoding): number {
  if (encoding.kind === "bloom") return encoding.num_cohorts;
  if (encoding.kind === "prefix") return encoding.lengths.length;
  return 1;
}

export function encodingHashes(encoding: Encoding): number {
  return encoding.kind === "direct" ? 1 : encoding.num_hashes;
}

/** The indices one member (bytes) sets in `cohort`. */
export function memberIndexer(encoding: Encoding, cohort: number): (data: Uint8Array) => number[] {
  if (!Number.isInteger(cohort) || cohort < 0 || cohort >= encodingCohorts(encoding)) {
    throw new ParameterError("cohort", `must be in [0, ${encodingCohorts(encoding) - 1}], got ${cohort}`);
  }
  if (encoding.kind === "bloom") {
    const { num_bits, num_hashes, hashing } = encoding;
    return (data) => bloomBits(data, cohort, num_bits, num_hashes, hashing);
  }
  if (encoding.kind === "prefix") {
    const { num_bits, num_hashes } = encoding;
    const length = encoding.lengths[cohort];
    return (data) => bloomBits(prefixOf(data, length), cohort, num_bits, num_hashes, "mmh3");
  }
  const index = new Map(encoding.domain.map((d, i) => [d, i]));
  const decoder = new TextDecoder("utf-8", { fatal: true });
  return (data) => {
    let position: number | undefined;
    try {
      position = index.get(decoder.decode(data));
    } catch {
      position = undefined;
    }
    if (position === undefined) throw new ParameterError("value", "is not in the declared domain");
    return [position];
  };
}

/** The members of a value or a set, as bytes. */
export function members(valueOrSet: Value | Iterable<Value>): Uint8Array[] {
  if (typeof valueOrSet === "string" || valueOrSet instanceof Uint8Array) return [valueBytes(valueOrSet)];
  if (valueOrSet != null && typeof (valueOrSet as Iterable<Value>)[Symbol.iterator] === "function") {
    return Array.from(valueOrSet as Iterable<Value>, valueBytes);
  }
  throw new ParameterError("value", "must be a string, bytes, or an iterable of them");
}

/** `"S" || u32be(n) || len32(m) || m ...`, members distinct and sorted bytewise (docs/wire.md 2.2). */
export function canonicalValue(valueOrSet: Value | Iterable<Value>): Uint8Array {
  const sorted = members(valueOrSet).sort(compareBytes);
  const distinct = sorted.filter((m, i) => i === 0 || compareBytes(m, sorted[i - 1]) !== 0);
  const parts = [utf8("S"), u32be(distinct.length)];
  for (const m of distinct) parts.push(u32be(m.length), m);
  return concat(...parts);
}

/** The inverse of {@link canonicalValue} (its members, sorted). */
export function membersOfCanonical(key: Uint8Array): Uint8Array[] {
  const view = new DataView(key.buffer, key.byteOffset, key.byteLength);
  if (key.length < 5 || key[0] !== 0x53) throw new ParameterError("value", "is not a canonical value");
  const count = view.getUint32(1);
  const out: Uint8Array[] = [];
  let at = 5;
  for (let i = 0; i < count; i++) {
    if (at + 4 > key.length) throw new ParameterError("value", "is not a canonical value (truncated)");
    const size = view.getUint32(at);
    out.push(key.slice(at + 4, at + 4 + size));
    at += 4 + size;
  }
  if (at !== key.length) throw new ParameterError("value", "is not a canonical value (trailing bytes)");
  return out;
}
