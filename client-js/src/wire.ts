/**
 * The report envelope and batches (docs/wire.md 5-7): report ids bound to the sealed body, the
 * associated data, sealing (X25519, HKDF-SHA256, AES-128-GCM), JSON and binary batches, and the
 * upload answer (wire version 2: `server_time`, `retry_after`; version 3: `clipped`).
 */

import { x25519 } from "@noble/curves/ed25519";
import { hkdf } from "@noble/hashes/hkdf";
import { sha256 } from "@noble/hashes/sha2";
import { b64d, b64e, concat, fromHex, u16be, u32be, u64be, u8, utf8 } from "./bytes.js";
import { ParameterError, ProtocolError } from "./errors.js";

export const CONTENT_TYPE_JSON = "application/json";
export const CONTENT_TYPE_BINARY = "application/vnd.onesided.batch";
export const WIRE_HEADER = "Onesided-Wire";
export const CLOCK_ANSWERS_VERSION = "2";
/** The answer version this client reads and asks for (`Onesided-Wire: 3`): version 2's keys and `clipped`. */
export const ANSWER_VERSION = "3";
export const MAX_RETRY_AFTER = 31_622_400;

export interface Envelope {
  report_id: Uint8Array;
  metric: string;
  params_digest: string;
  round: number;
  window: number;
  sealed: Uint8Array;
}

/** `SHA-256("onesided/report-id/v1" || enc)[:16]`: a sealed report's id. */
export function sealedReportId(ephemeralPublic: Uint8Array): Uint8Array {
  return sha256(concat(utf8("onesided/report-id/v1"), ephemeralPublic)).slice(0, 16);
}

function metadata(reportId: Uint8Array, metric: string, digest: string, round: number, window: number): Uint8Array {
  const name = utf8(metric);
  if (name.length < 1 || name.length > 64) throw new ParameterError("metric", "must be 1 to 64 bytes");
  return concat(reportId, u8(name.length), name, fromHex(digest, "params_digest"), u32be(round), u64be(window));
}

/** The associated data bound into the sealed payload (docs/wire.md 5). */
export function reportAad(reportId: Uint8Array, metric: string, digest: string, round: number, window: number): Uint8Array {
  return concat(utf8("onesided/report/v1"), metadata(reportId, metric, digest, round, window));
}

export interface Ephemeral {
  privateKey: Uint8Array;
  publicKey: Uint8Array;
}

export function ephemeralKey(privateKey?: Uint8Array): Ephemeral {
  const sk = privateKey ?? x25519.utils.randomPrivateKey();
  return { privateKey: sk, publicKey: x25519.getPublicKey(sk) };
}

/** Key and nonce of one envelope: HKDF-SHA256(ikm = X25519(skE, pkR), info = label || pkE || pkR), 28 bytes. */
export function sealingKey(ephemeral: Ephemeral, recipient: Uint8Array): { key: Uint8Array; nonce: Uint8Array } {
  return keySchedule(x25519.getSharedSecret(ephemeral.privateKey, recipient), ephemeral.publicKey, recipient);
}

function keySchedule(shared: Uint8Array, ephemeralPublic: Uint8Array, recipient: Uint8Array): { key: Uint8Array; nonce: Uint8Array } {
  if (shared.every((b) => b === 0)) throw new ParameterError("seal_public", "is a low-order point");
  const okm = hkdf(sha256, shared, undefined, concat(utf8("onesided/seal/v1"), ephemeralPublic, recipient), 28);
  return { key: okm.slice(0, 16), nonce: okm.slice(16, 28) };
}

/** A copy on its own ArrayBuffer (what Web Crypto's types ask for). */
export function own(data: Uint8Array): Uint8Array<ArrayBuffer> {
  return new Uint8Array(data);
}

function subtle(): SubtleCrypto {
  const s = globalThis.crypto?.subtle;
  if (!s) throw new ParameterError("crypto", "Web Crypto (crypto.subtle) is required: install a polyfill on React Native");
  return s;
}

/**
 * A fresh ephemeral key and its shared secret with `recipient`: Web Crypto's X25519 where the
 * platform has it (off the page's thread, ~1 ms), else @noble/curves (~2.5 ms a scalar product
 * on the calling thread).
 */
async function agreement(recipient: Uint8Array): Promise<{ publicKey: Uint8Array; shared: Uint8Array }> {
  const s = subtle();
  try {
    const pair = (await s.generateKey({ name: "X25519" }, false, ["deriveBits"])) as CryptoKeyPair;
    const peer = await s.importKey("raw", own(recipient), { name: "X25519" }, false, []);
    const shared = await s.deriveBits({ name: "X25519", public: peer } as unknown as AlgorithmIdentifier, pair.privateKey, 256);
    return { publicKey: new Uint8Array(await s.exportKey("raw", pair.publicKey)), shared: new Uint8Array(shared) };
  } catch {
    const ephemeral = ephemeralKey();
    return { publicKey: ephemeral.publicKey, shared: x25519.getSharedSecret(ephemeral.privateKey, recipient) };
  }
}

async function encrypt(keys: { key: Uint8Array; nonce: Uint8Array }, plaintext: Uint8Array, aad: Uint8Array): Promise<Uint8Array> {
  const k = await subtle().importKey("raw", own(keys.key), "AES-GCM", false, ["encrypt"]);
  const ct = await subtle().encrypt({ name: "AES-GCM", iv: own(keys.nonce), additionalData: own(aad), tagLength: 128 }, k,
    own(plaintext));
  return new Uint8Array(ct);
}

/** `pkE || AES-128-GCM(key, nonce, plaintext, aad)` (docs/wire.md 6) with a given ephemeral key (test vectors). */
export async function seal(
  plaintext: Uint8Array, aad: Uint8Array, recipient: Uint8Array, ephemeral: Ephemeral,
): Promise<Uint8Array> {
  return concat(ephemeral.publicKey, await encrypt(sealingKey(ephemeral, recipient), plaintext, aad));
}

/** Seal one report: a fresh ephemeral key (or the given one), the id bound to it, the AAD to its metadata. */
export async function buildReport(args: {
  metric: string; params_digest: string; round: number; window: number; payload: Uint8Array;
  seal_public: Uint8Array; ephemeral?: Ephemeral;
}): Promise<Envelope> {
  const agreed = args.ephemeral
    ? { publicKey: args.ephemeral.publicKey, shared: x25519.getSharedSecret(args.ephemeral.privateKey, args.seal_public) }
    : await agreement(args.seal_public);
  const reportId = sealedReportId(agreed.publicKey);
  const aad = reportAad(reportId, args.metric, args.params_digest, args.round, args.window);
  const body = await encrypt(keySchedule(agreed.shared, agreed.publicKey, args.seal_public), args.payload, aad);
  return { report_id: reportId, metric: args.metric, params_digest: args.params_digest, round: args.round,
    window: args.window, sealed: concat(agreed.publicKey, body) };
}

export function envelopeToJson(e: Envelope): Record<string, unknown> {
  return { report_id: b64e(e.report_id), metric: e.metric, round: e.round, window: e.window,
    params_digest: e.params_digest, sealed: b64e(e.sealed) };
}

export function envelopeFromJson(x: Record<string, unknown>): Envelope {
  return { report_id: b64d(x.report_id as string, "report_id"), metric: x.metric as string,
    params_digest: x.params_digest as string, round: x.round as number, window: x.window as number,
    sealed: b64d(x.sealed as string, "sealed") };
}

/** The JSON batch text (docs/wire.md 7.1). */
export function encodeBatchJson(reports: Envelope[]): string {
  return JSON.stringify({ version: 1, reports: reports.map(envelopeToJson) });
}

/** The binary batch (docs/wire.md 7.2). */
export function encodeBatchBinary(reports: Envelope[]): Uint8Array {
  const parts = [utf8("ONSB"), u8(1), u32be(reports.length)];
  for (const r of reports) {
    parts.push(metadata(r.report_id, r.metric, r.params_digest, r.round, r.window), u8(1), u16be(r.sealed.length),
      r.sealed);
  }
  return concat(...parts);
}

export const STATUSES = ["accepted", "replayed", "invalid_message", "decrypt_error", "outdated_config",
  "too_early", "expired", "unknown_metric"] as const;
export type Status = (typeof STATUSES)[number];

export interface ReportResult {
  report_id: string;
  status: Status;
  field: string | null;
  detail: string | null;
  /** Wire version 2: keep the report and resend it no sooner than this many seconds. */
  retry_after: number | null;
}

export interface UploadAnswer {
  results: ReportResult[];
  accepted: number;
  /** Wire version 2: the server's clock when it judged the batch, Unix seconds. */
  server_time: number | null;
  /** Wire version 3: how many accepted reports the server clipped to their metric's `max_items`. */
  clipped: number | null;
}

const CLOCK_STATUSES: readonly Status[] = ["too_early", "expired"];

/** A JSON object with exactly the `required` keys and some of the `optional` ones (errors name the field). */
function object(value: unknown, field: string, required: string[], optional: string[]): Record<string, unknown> {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new ProtocolError(field || null, "must be a JSON object");
  }
  const prefix = field ? `${field}.` : "";
  for (const name of required) if (!(name in value)) throw new ProtocolError(`${prefix}${name}`, "is required");
  const unknown = Object.keys(value).filter((k) => !required.includes(k) && !optional.includes(k)).sort();
  if (unknown.length) throw new ProtocolError(`${prefix}${unknown[0]}`, "is not a known field");
  return value as Record<string, unknown>;
}

function integer(value: unknown, field: string, low: number, high: number): number {
  if (typeof value !== "number" || !Number.isInteger(value)) throw new ProtocolError(field, "must be an integer");
  if (value < low || value > high) throw new ProtocolError(field, `must be in [${low}, ${high}], got ${value}`);
  return value;
}

function optionalText(value: unknown, field: string): string | null {
  if (value !== undefined && value !== null && typeof value !== "string") {
    throw new ProtocolError(field, "must be a string or null");
  }
  return (value as string | undefined) ?? null;
}

function reportResult(item: unknown, i: number): ReportResult {
  const where = `results[${i}]`;
  const r = object(item, where, ["report_id", "status"], ["field", "detail", "retry_after"]);
  if (typeof r.report_id !== "string") throw new ProtocolError(`${where}.report_id`, "must be a base64url string");
  if (!STATUSES.includes(r.status as Status)) throw new ProtocolError(`${where}.status`, "unknown status");
  const status = r.status as Status;
  const field = optionalText(r.field, `${where}.field`);
  const detail = optionalText(r.detail, `${where}.detail`);
  let retry: number | null = null;
  if (r.retry_after !== undefined && r.retry_after !== null) {
    retry = integer(r.retry_after, `${where}.retry_after`, 1, MAX_RETRY_AFTER);
    if (!CLOCK_STATUSES.includes(status)) {
      throw new ProtocolError(`${where}.retry_after`, `only on too_early and expired, got ${status}`);
    }
  }
  return { report_id: r.report_id, status, field, detail, retry_after: retry };
}

/**
 * Read and check the upload answer (docs/wire.md 7.4) of a batch of `count` reports; errors name the
 * field as the Python client's do (tests/vectors/answers.json holds both to the same answers).
 */
export function parseUploadResponse(body: unknown, count: number): UploadAnswer {
  const b = object(body, "", ["results", "accepted"], ["server_time", "clipped"]);
  if (!Array.isArray(b.results)) throw new ProtocolError("results", "must be a list");
  const results = b.results.map(reportResult);
  const accepted = results.filter((r) => r.status === "accepted").length;
  if (integer(b.accepted, "accepted", 0, results.length) !== accepted) {
    throw new ProtocolError("accepted", `says ${String(b.accepted)} but ${accepted} results are accepted`);
  }
  const serverTime = b.server_time == null ? null : integer(b.server_time, "server_time", 0, Number.MAX_SAFE_INTEGER);
  const clipped = b.clipped == null ? null : integer(b.clipped, "clipped", 0, accepted);
  if (results.length !== count) throw new ProtocolError("results", `expected ${count} results`);
  return { results, accepted, server_time: serverTime, clipped };
}

/** `floor(t / time_precision) * time_precision`. */
export function windowStart(timestamp: number, timePrecision: number): number {
  return Math.floor(Math.floor(timestamp) / timePrecision) * timePrecision;
}
