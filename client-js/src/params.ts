/** A metric's parameters as the signed config carries them (docs/wire.md 13.7), checked on the way in. */

import { sha256 } from "@noble/hashes/sha2";
import { toHex, utf8 } from "./bytes.js";
import { Encoding, encodingBits, encodingCohorts, encodingHashes } from "./encodings.js";
import { ParameterError } from "./errors.js";
import { canonicalJson, Json, JsonFloat, plain } from "./json.js";

export type Mode = "symmetric" | "asymmetric" | "trusted";
export type Irr = [number | null, number | null];

export interface MetricParams {
  readonly name: string;
  readonly encoding: Encoding;
  readonly mode: Mode;
  /** Infinity for the trusted mode. */
  readonly level: number;
  readonly irr_p: number | null;
  readonly irr_q: number | null;
  readonly value_kind: "set" | "categorical";
  readonly none_value: string | null;
  readonly time_precision: number;
  readonly min_batch_size: number;
  readonly num_bits: number;
  readonly num_hashes: number;
  readonly num_cohorts: number;
  /** The signed JSON object, spellings kept (so its digest can be recomputed). */
  readonly json: Json;
}

const NAME = /^[a-z0-9][a-z0-9_.-]{0,63}$/;
const MODES = ["symmetric", "asymmetric", "trusted"];

function num(x: Json, field: string, nullable = false): number | null {
  if (x === null && nullable) return null;
  if (x instanceof JsonFloat) return x.value;
  if (typeof x === "number") return x;
  throw new ParameterError(field, `must be a number${nullable ? " or null" : ""}`);
}

function int(x: Json, field: string, low: number, high: number): number {
  if (typeof x !== "number" || !Number.isInteger(x) || x < low || x > high) {
    throw new ParameterError(field, `must be an integer in [${low}, ${high}]`);
  }
  return x;
}

function encodingOf(x: Json, field: string): Encoding {
  const e = plain(x) as Record<string, unknown>;
  if (e === null || typeof e !== "object") throw new ParameterError(field, "must be an object");
  const raw = x as Record<string, Json>;
  if (e.kind === "bloom") {
    const hashing = e.hashing ?? "mmh3";
    if (hashing !== "mmh3" && hashing !== "rappor-md5") throw new ParameterError(`${field}.hashing`, "unknown");
    return {
      kind: "bloom", num_bits: int(raw.num_bits, `${field}.num_bits`, 1, 4096),
      num_hashes: int(raw.num_hashes, `${field}.num_hashes`, 1, 64),
      num_cohorts: int(raw.num_cohorts, `${field}.num_cohorts`, 1, 65536), hashing,
    };
  }
  if (e.kind === "prefix") {
    const lengths = raw.lengths;
    if (!Array.isArray(lengths) || lengths.length < 1) throw new ParameterError(`${field}.lengths`, "must be a list");
    return {
      kind: "prefix", num_bits: int(raw.num_bits, `${field}.num_bits`, 1, 4096),
      num_hashes: int(raw.num_hashes, `${field}.num_hashes`, 1, 64),
      lengths: lengths.map((v, i) => int(v, `${field}.lengths[${i}]`, 1, 1024)),
    };
  }
  if (e.kind === "direct") {
    const domain = e.domain;
    if (!Array.isArray(domain) || !domain.length || !domain.every((d) => typeof d === "string")) {
      throw new ParameterError(`${field}.domain`, "must be a non-empty list of strings");
    }
    return { kind: "direct", domain: domain as string[] };
  }
  throw new ParameterError(`${field}.kind`, "must be 'bloom', 'direct' or 'prefix'");
}

/** Read a metric's `params` object (as parsed by `parseJson`); errors name the field under `field`. */
export function metricParams(x: Json, field = "params"): MetricParams {
  if (x === null || typeof x !== "object" || Array.isArray(x) || x instanceof JsonFloat) {
    throw new ParameterError(field, "must be an object");
  }
  const d = x as Record<string, Json>;
  if (d.version !== 1) throw new ParameterError(`${field}.version`, "must be 1");
  if (typeof d.name !== "string" || !NAME.test(d.name)) throw new ParameterError(`${field}.name`, "is not a metric name");
  if (typeof d.mode !== "string" || !MODES.includes(d.mode)) throw new ParameterError(`${field}.mode`, "unknown mode");
  const encoding = encodingOf(d.encoding, `${field}.encoding`);
  const level = num(d.level, `${field}.level`, true);
  const mode = d.mode as Mode;
  if ((mode === "trusted") !== (level === null) || (level !== null && !(level > 0))) {
    throw new ParameterError(`${field}.level`, "must be > 0 (null for the trusted mode)");
  }
  const irrP = num(d.irr_p ?? null, `${field}.irr_p`, true);
  const irrQ = num(d.irr_q ?? null, `${field}.irr_q`, true);
  for (const [name, p] of [["irr_p", irrP], ["irr_q", irrQ]] as const) {
    if (p !== null && !(p >= 0 && p <= 1)) throw new ParameterError(`${field}.${name}`, "must be in [0, 1]");
  }
  if (d.value_kind !== "set" && d.value_kind !== "categorical") {
    throw new ParameterError(`${field}.value_kind`, "must be 'set' or 'categorical'");
  }
  const none = d.none_value ?? null;
  if (none !== null && typeof none !== "string") throw new ParameterError(`${field}.none_value`, "must be a string");
  return {
    name: d.name, encoding, mode, level: level ?? Infinity, irr_p: irrP, irr_q: irrQ,
    value_kind: d.value_kind, none_value: none as string | null,
    time_precision: int(d.time_precision, `${field}.time_precision`, 1, Number.MAX_SAFE_INTEGER),
    min_batch_size: int(d.min_batch_size, `${field}.min_batch_size`, 0, Number.MAX_SAFE_INTEGER),
    num_bits: encodingBits(encoding), num_hashes: encodingHashes(encoding), num_cohorts: encodingCohorts(encoding),
    json: x,
  };
}

/** `params_digest`: SHA-256 of the canonical JSON of the parameters, hex (docs/wire.md 1.3). */
export function paramsDigest(params: MetricParams): string {
  return toHex(sha256(utf8(canonicalJson(params.json))));
}

/** The parameters with the IRR `irr` (what a round that relaxed the IRR reports with). */
export function withIrr(params: MetricParams, irr: Irr | null): MetricParams {
  if (irr === null || (irr[0] === params.irr_p && irr[1] === params.irr_q)) return params;
  return { ...params, irr_p: irr[0], irr_q: irr[1] };
}

export function randomized(params: MetricParams): boolean {
  return params.mode !== "trusted";
}
