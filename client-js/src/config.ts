/**
 * Signed documents (docs/wire.md 8): Ed25519 over `"onesided/sign/v1" || canonical_json(payload)`,
 * the config (keys, metrics, open rounds) and round announcements, and the signing-key rotation
 * (a config verified with a trusted key may announce the next key, trusted from then on).
 */

import { ed25519 } from "@noble/curves/ed25519";
import { sha256 } from "@noble/hashes/sha2";
import { b64d, concat, toHex, utf8 } from "./bytes.js";
import { SignatureError, ParameterError } from "./errors.js";
import { canonicalJson, Json, JsonFloat } from "./json.js";
import { MetricParams, metricParams, paramsDigest } from "./params.js";

export function keyId(publicKey: Uint8Array): string {
  return toHex(sha256(publicKey).slice(0, 8));
}

type Obj = { [key: string]: Json };

function isObject(x: Json): x is Obj {
  return x !== null && typeof x === "object" && !Array.isArray(x) && !(x instanceof JsonFloat);
}

/** Check a signed document `{payload, key_id, signature}` against `publicKey`; returns its payload. */
export function verifyDocument(document: Json, publicKey: Uint8Array, field = ""): Obj {
  const at = (name: string) => (field ? `${field}.${name}` : name);
  if (!isObject(document)) throw new SignatureError(field || "document", "must be an object");
  for (const k of Object.keys(document)) {
    if (!["payload", "key_id", "signature"].includes(k)) throw new SignatureError(at(k), "is not a known field");
  }
  const { payload, key_id: kid, signature } = document;
  if (!isObject(payload)) throw new SignatureError(at("payload"), "must be an object");
  if (kid !== keyId(publicKey)) throw new SignatureError(at("key_id"), "does not match the trusted key");
  let sig: Uint8Array;
  try {
    sig = b64d(signature as string, at("signature"));
  } catch {
    throw new SignatureError(at("signature"), "is not base64url");
  }
  const message = concat(utf8("onesided/sign/v1"), utf8(canonicalJson(payload)));
  let ok = false;
  try {
    ok = sig.length === 64 && ed25519.verify(sig, message, publicKey);
  } catch {
    ok = false;
  }
  if (!ok) throw new SignatureError(at("signature"), "does not verify");
  return payload;
}

export interface RoundAnnouncement {
  round_id: number;
  metric: string;
  params_digest: string;
  level_from: number;
  level_to: number;
  cohorts: number[] | null;
  opened_at: number;
  expires_at: number;
  /** The IRR after the round (`irr_q` null: the IRR is kept). */
  irr_p: number | null;
  irr_q: number | null;
}

export interface MetricEntry {
  params: MetricParams;
  digest: string;
  current_round: number;
  current_level: number;
}

export interface Config {
  issued_at: number;
  seal_public: Uint8Array;
  sign_public: Uint8Array;
  next_sign_public: Uint8Array | null;
  metrics: Map<string, MetricEntry>;
  rounds: RoundAnnouncement[];
  sync_interval: number | null;
}

function number(x: Json, field: string): number {
  if (x instanceof JsonFloat) return x.value;
  if (typeof x === "number") return x;
  throw new SignatureError(field, "must be a number");
}

function integer(x: Json, field: string, low: number): number {
  if (typeof x !== "number" || !Number.isInteger(x) || x < low) throw new SignatureError(field, `must be an integer >= ${low}`);
  return x;
}

function key32(x: Json, field: string): Uint8Array {
  const out = b64d(x as string, field);
  if (out.length !== 32) throw new SignatureError(field, "must be 32 bytes");
  return out;
}

function roundOf(payload: Obj, field: string): RoundAnnouncement {
  const known = ["version", "round_id", "metric", "params_digest", "level_from", "level_to", "cohorts", "opened_at",
    "expires_at", "irr_p", "irr_q"];
  for (const k of Object.keys(payload)) if (!known.includes(k)) throw new SignatureError(`${field}.${k}`, "is not a known field");
  const irrQ = "irr_q" in payload ? number(payload.irr_q, `${field}.irr_q`) : null;
  const irrP = "irr_p" in payload ? number(payload.irr_p, `${field}.irr_p`) : null;
  if (irrP !== null && irrQ === null) throw new SignatureError(`${field}.irr_q`, "is required with irr_p");
  const from = number(payload.level_from, `${field}.level_from`);
  const to = number(payload.level_to, `${field}.level_to`);
  if (!(from > 0) || !(to < Infinity) || !(to > from || (to === from && irrQ !== null))) {
    throw new SignatureError(`${field}.level_to`, "must be above level_from");
  }
  const cohorts = payload.cohorts;
  if (cohorts !== null && !(Array.isArray(cohorts) && cohorts.length && cohorts.every((c) => typeof c === "number"))) {
    throw new SignatureError(`${field}.cohorts`, "must be null or a list of cohorts");
  }
  return {
    round_id: integer(payload.round_id, `${field}.round_id`, 1), metric: String(payload.metric),
    params_digest: String(payload.params_digest), level_from: from, level_to: to,
    cohorts: cohorts as number[] | null, opened_at: integer(payload.opened_at, `${field}.opened_at`, 0),
    expires_at: integer(payload.expires_at, `${field}.expires_at`, 1), irr_p: irrP, irr_q: irrQ,
  };
}

/** Verify a config document with `publicKey` and read it; errors name the field by path. */
export function verifyConfig(document: Json, publicKey: Uint8Array): Config {
  const payload = verifyDocument(document, publicKey);
  if (payload.version !== 1) throw new SignatureError("version", "must be 1");
  const agg = payload.aggregator;
  if (!isObject(agg)) throw new SignatureError("aggregator", "must be an object");
  const sealPublic = key32(agg.seal_public, "aggregator.seal_public");
  const signPublic = key32(agg.sign_public, "aggregator.sign_public");
  if (agg.seal_key_id !== keyId(sealPublic)) throw new SignatureError("aggregator.seal_key_id", "does not match");
  if (agg.sign_key_id !== keyId(signPublic)) throw new SignatureError("aggregator.sign_key_id", "does not match");
  if (toHex(signPublic) !== toHex(publicKey)) throw new SignatureError("aggregator.sign_public", "is not the verifying key");
  let next: Uint8Array | null = null;
  if (("next_sign_public" in agg) !== ("next_sign_key_id" in agg)) {
    throw new SignatureError("aggregator.next_sign_public", "next_sign_public and next_sign_key_id go together");
  }
  if ("next_sign_public" in agg) {
    next = key32(agg.next_sign_public, "aggregator.next_sign_public");
    if (agg.next_sign_key_id !== keyId(next)) throw new SignatureError("aggregator.next_sign_key_id", "does not match");
  }
  const metrics = new Map<string, MetricEntry>();
  const list = Array.isArray(payload.metrics) ? payload.metrics : [];
  list.forEach((m, i) => {
    const at = `metrics[${i}]`;
    if (!isObject(m)) throw new SignatureError(at, "must be an object");
    let params: MetricParams;
    try {
      params = metricParams(m.params, `${at}.params`);
    } catch (e) {
      throw new SignatureError((e as ParameterError).field ?? at, (e as Error).message);
    }
    if (metrics.has(params.name)) throw new SignatureError(`${at}.params.name`, "is repeated");
    if (m.digest !== paramsDigest(params)) throw new SignatureError(`${at}.digest`, "does not match the parameters");
    const level = m.current_level === null ? Infinity : number(m.current_level, `${at}.current_level`);
    metrics.set(params.name, { params, digest: m.digest as string,
      current_round: integer(m.current_round, `${at}.current_round`, 0), current_level: level });
  });
  const rounds = (Array.isArray(payload.rounds) ? payload.rounds : []).map((doc, i) => {
    const at = `rounds[${i}]`;
    const round = roundOf(verifyDocument(doc, publicKey, at), `${at}.payload`);
    const entry = metrics.get(round.metric);
    if (!entry || entry.digest !== round.params_digest) {
      throw new SignatureError(`${at}.payload.params_digest`, "does not name a metric of the config with its digest");
    }
    if (round.cohorts && round.cohorts.some((c) => c < 0 || c >= entry.params.num_cohorts)) {
      throw new SignatureError(`${at}.payload.cohorts`, "out of range");
    }
    return round;
  });
  const syncInterval = "sync_interval" in payload ? integer(payload.sync_interval, "sync_interval", 60) : null;
  return { issued_at: integer(payload.issued_at, "issued_at", 0), seal_public: sealPublic, sign_public: signPublic,
    next_sign_public: next, metrics, rounds, sync_interval: syncInterval };
}

/** The trusted key a document names by `key_id`, among `trusted` (pins and learned keys). */
export function keyFor(document: Json, trusted: Uint8Array[]): Uint8Array {
  const kid = isObject(document) ? document.key_id : undefined;
  const key = trusted.find((k) => keyId(k) === kid);
  if (!key) throw new SignatureError("key_id", `the config is signed by key id ${String(kid).slice(0, 64)}, which this client does not trust`);
  return key;
}
