/**
 * The client an app embeds: `report()` randomizes on the device, charges the ledger and queues in
 * memory, and returns at once with a status; a background sender persists the encrypted state,
 * seals, uploads with retries, follows rounds from the signed config, and flushes when the page is
 * hidden and on `close()`. Nothing the environment causes (network, storage, server, clocks) ever
 * throws into the app; it is told through `onEvent` and the optional `logger`.
 */

import { b64d, b64e, fromHex, toHex } from "./bytes.js";
import { canonicalValue, Value } from "./encodings.js";
import { OnesidedError, ParameterError, PolicyError, ProtocolError, TransportError } from "./errors.js";
import { Config, keyFor, keyId, MetricEntry, RoundAnnouncement, verifyConfig } from "./config.js";
import { parseJson } from "./json.js";
import { irrGarbling, irrLevel } from "./irr.js";
import {
  budgetOf, Budget, Ceiling, chargeNewWindow, chargeRelaxation, MetricRecord, newRecord, resendRelaxed, settle,
} from "./ledger.js";
import { Irr, withIrr } from "./params.js";
import { RandomSource, secureRandom } from "./random.js";
import { PAYLOAD_HEADER_BYTES, relaxedPayload, reportPayload, unpackBits } from "./report.js";
import { MemoryStorage, StateBox, StorageAdapter } from "./storage.js";
import {
  ANSWER_VERSION, buildReport, CONTENT_TYPE_JSON, encodeBatchJson, envelopeFromJson, envelopeToJson,
  parseUploadResponse, WIRE_HEADER, windowStart,
} from "./wire.js";

export type ReportStatus = "queued" | "repeated" | "waiting" | "refused" | "dropped" | "disabled";

export interface ReportOutcome {
  status: ReportStatus;
  /** Why a report was refused or dropped. */
  reason?: string;
}

export type EventType = "config" | "stale_config" | "sign_key_learned" | "round_joined" | "round_refused" | "sent"
  | "rejected" | "retry_later" | "refused" | "dropped" | "transport_error" | "storage_error" | "clock_skew"
  | "clipped";

export interface ClientEvent {
  type: EventType;
  metric: string | null;
  detail: string;
}

export interface Logger {
  debug?(message: string): void;
  info?(message: string): void;
  warn?(message: string): void;
}

export interface ClientOptions {
  /** The aggregator's base URL, e.g. `https://telemetry.example.com`. */
  serverUrl: string;
  /** The pinned Ed25519 key(s) (base64url, `onesided keys show`): a config must be signed by one. */
  serverPublicKeys: string | string[];
  /** The ceiling per metric: a number, or by metric name with `"*"` as the default. */
  maxEpsilon: number | Record<string, number>;
  /** A renewing budget: the ceiling is per period ("day", "week", "month" = 30 days, or seconds). */
  budgetPeriod?: "day" | "week" | "month" | number | null;
  storage?: StorageAdapter;
  /** The state key (16 or 32 bytes), e.g. from the platform keychain; else the adapter's or a stored one. */
  stateKey?: Uint8Array;
  /** Every call a cheap no-op (an opt-out switch). */
  disabled?: boolean;
  /**
   * A stored state that does not decrypt or cannot be read: "stop" (default) reports nothing this
   * session and keeps the stored state as it is; "reset" starts a new state (the old ledger is lost).
   */
  onCorrupt?: "stop" | "reset";
  /** Programmer errors (an unknown metric, a value outside a domain) throw instead of returning "refused". */
  strict?: boolean;
  onEvent?: (event: ClientEvent) => void;
  logger?: Logger;
  /** Seconds between background sends (default 5). */
  sendInterval?: number;
  /** Seconds between config syncs when the config does not say (default 3600). */
  syncInterval?: number;
  batchSize?: number;
  /** The queue's bound: the oldest report is dropped past it (default 10,000). */
  maxQueue?: number;
  /** The longest wait a server's Retry-After or retry_after can impose, seconds (default 3600). */
  retryAfterCap?: number;
  /** The deadline of `close()` and of a flush without one, seconds (default 2). */
  exitDeadline?: number;
  /** Start the background sender (default true); false: the app calls `sync()` and `flush()`. */
  background?: boolean;
  /** The app's consent to a relaxation round (default: every round the ceiling allows). */
  acceptRound?: (round: RoundAnnouncement) => boolean;
  fetch?: typeof fetch;
  /** Wall clock in milliseconds (tests); corrected by the server's when the device's is off. */
  clock?: () => number;
  /** Monotonic milliseconds (tests): what backoff and sync schedules wait on. */
  monotonic?: () => number;
  random?: RandomSource;
}

interface QueueItem {
  metric: string;
  digest: string;
  round: number;
  window: number;
  payload: string;
  envelope?: Record<string, unknown>;
  notBefore: number;
}

interface State {
  version: 1;
  secret: string;
  config: string | null;
  learned: string[];
  metrics: Record<string, MetricRecord>;
  pending: { metric: string; value: string | string[]; at: number }[];
  queue: QueueItem[];
}

const PERIODS: Record<string, number> = { day: 86_400, week: 7 * 86_400, month: 30 * 86_400 };
const MAX_PENDING = 100;
const SKEW_MS = 120_000;
const MAX_BACKOFF_MS = 300_000;

function positive(name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (typeof v !== "number" || !(v > 0) || !Number.isFinite(v)) throw new ParameterError(name, `must be a number > 0, got ${v}`);
  return v;
}

export class Client {
  private readonly url: string;
  private readonly pins: Uint8Array[];
  private readonly options: ClientOptions;
  private readonly fetchFn: typeof fetch;
  private readonly random: RandomSource;
  private readonly box: StateBox;
  private readonly period: number | null;
  private state: State | null = null;
  private config: Config | null = null;
  private early: { metric: string; value: string | string[]; at: number }[] = [];
  private offsetMs = 0;
  private dirty = false;
  private failures = 0;
  private syncFailed = false;
  /** Why reporting stopped (a stored state that cannot be read), or null. */
  private stopped: string | null = null;
  private nextSendAt = 0;
  private nextSyncAt = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  /** Sends run one at a time: a report is sealed once, so it leaves under one id only. */
  private sending: Promise<unknown> = Promise.resolve();
  private running: Promise<void> | null = null;
  private closed = false;
  private readonly ready: Promise<void>;
  private readonly onHide = () => {
    if (typeof document !== "undefined" && document.visibilityState === "hidden") void this.flush({ keepalive: true });
  };

  constructor(options: ClientOptions) {
    this.options = options;
    if (typeof options.serverUrl !== "string" || !/^https?:\/\//.test(options.serverUrl)) {
      throw new ParameterError("serverUrl", "must be an http(s) URL");
    }
    this.url = options.serverUrl.replace(/\/+$/, "");
    const keys = Array.isArray(options.serverPublicKeys) ? options.serverPublicKeys : [options.serverPublicKeys];
    this.pins = keys.map((k, i) => {
      const raw = b64d(k, `serverPublicKeys[${i}]`);
      if (raw.length !== 32) throw new ParameterError(`serverPublicKeys[${i}]`, "must be a 32-byte Ed25519 key");
      return raw;
    });
    if (!this.pins.length) throw new ParameterError("serverPublicKeys", "must pin at least one key");
    const ceilings = typeof options.maxEpsilon === "number" ? { "*": options.maxEpsilon } : options.maxEpsilon;
    for (const [k, v] of Object.entries(ceilings ?? {})) {
      if (typeof v !== "number" || !(v >= 0)) throw new ParameterError(`maxEpsilon.${k}`, "must be a number >= 0");
    }
    const p = options.budgetPeriod ?? null;
    this.period = p === null ? null : typeof p === "number" ? positive("budgetPeriod", p, 1) : PERIODS[p];
    if (this.period === undefined) throw new ParameterError("budgetPeriod", "must be day, week, month or seconds");
    for (const [name, fallback] of [["sendInterval", 5], ["syncInterval", 3600], ["retryAfterCap", 3600],
      ["exitDeadline", 2], ["batchSize", 100], ["maxQueue", 10_000]] as const) {
      positive(name, options[name], fallback);
    }
    const fetchFn = options.fetch ?? globalThis.fetch?.bind(globalThis);
    if (typeof fetchFn !== "function") throw new ParameterError("fetch", "this platform has no fetch: pass options.fetch");
    this.fetchFn = fetchFn;
    this.random = options.random ?? secureRandom;
    this.box = new StateBox(options.storage ?? new MemoryStorage(), options.stateKey ?? null, (n) => this.random.bytes(n));
    this.ready = options.disabled ? Promise.resolve() : this.open();
    if (!options.disabled && options.background !== false) {
      this.schedule(0);
      if (typeof document !== "undefined") document.addEventListener("visibilitychange", this.onHide);
      if (typeof window !== "undefined") window.addEventListener("pagehide", this.onHide);
    }
  }

  // --- reporting ------------------------------------------------------------------------

  /**
   * Randomize and queue one report of `value` (a value, or a set of values) for `metric`. Returns
   * at once, never throws (with `strict: true`, programmer errors do): "queued" (it leaves later),
   * "repeated" (the window's value again: nothing new), "waiting" (no config yet: kept, reported
   * when one arrives), "refused" (the policy or the ceiling says no: nothing charged), "dropped"
   * (not kept), "disabled".
   */
  report(metric: string, value: Value | Iterable<Value>): ReportOutcome {
    if (this.options.disabled) return { status: "disabled" };
    if (this.stopped) return { status: "refused", reason: this.stopped };
    try {
      const kept = this.keepable(value);
      const at = this.now();
      if (!this.state || !this.config) return this.wait(metric, kept, at);
      return this.reportAt(metric, kept, at);
    } catch (e) {
      const strictError = e instanceof ParameterError || e instanceof PolicyError;
      if (this.options.strict && strictError) throw e;
      const reason = e instanceof Error ? e.message : String(e);
      const status = e instanceof OnesidedError ? "refused" : "dropped"; // dropped: an unexpected failure, kept quiet
      this.event(status, metric, reason);
      return { status, reason };
    }
  }

  private keepable(value: Value | Iterable<Value>): string | string[] {
    const text = (v: Value) => (typeof v === "string" ? v : new TextDecoder("utf-8", { fatal: true }).decode(v));
    if (typeof value === "string" || value instanceof Uint8Array) return text(value);
    if (value != null && typeof (value as Iterable<Value>)[Symbol.iterator] === "function") {
      return Array.from(value as Iterable<Value>, text);
    }
    throw new ParameterError("value", "must be a string, bytes, or an iterable of them");
  }

  private wait(metric: string, value: string | string[], at: number): ReportOutcome {
    const list = this.state ? this.state.pending : this.early;
    const same = JSON.stringify([metric, value]);
    if (!list.some((p) => JSON.stringify([p.metric, p.value]) === same)) {
      if (list.length >= MAX_PENDING) return { status: "dropped", reason: "too many reports wait for the first config" };
      list.push({ metric, value, at });
      this.dirty = true;
    }
    return { status: "waiting" };
  }

  private reportAt(metric: string, value: string | string[], at: number): ReportOutcome {
    const state = this.state as State;
    const entry = this.entry(metric);
    const params = entry.params;
    if (params.value_kind === "categorical" && typeof value !== "string") {
      throw new ParameterError("value", `'${metric}' is categorical: report one value, not a set`);
    }
    const record = this.record(entry);
    const window = windowStart(at / 1000, params.time_precision);
    const key = b64e(canonicalValue(value));
    const current = record.current;
    if (current && window < current.window) {
      throw new PolicyError("window", "the clock is before the window of this metric's last report");
    }
    if (current && window === current.window) {
      if (current.value === key) return { status: "repeated" };
      throw new PolicyError("value", `'${metric}' already reported another value in this window`);
    }
    const payload = reportPayload({ secret: b64d(state.secret, "secret"), params: withIrr(params, record.irr),
      cohort: record.cohort, window, value }, [record.level], this.random.uniforms(params.num_bits));
    chargeNewWindow(record, params, this.ceiling(metric), window, key, toHex(payload.slice(PAYLOAD_HEADER_BYTES)));
    this.enqueue({ metric, digest: entry.digest, round: record.round, window, payload: b64e(payload), notBefore: 0 });
    return { status: "queued" };
  }

  private enqueue(item: QueueItem): void {
    const queue = (this.state as State).queue;
    queue.push(item);
    if (queue.length > positive("maxQueue", this.options.maxQueue, 10_000)) {
      const dropped = queue.shift() as QueueItem;
      this.event("dropped", dropped.metric, "the queue is full: its oldest report was dropped");
    }
    this.dirty = true;
    if (queue.length >= positive("batchSize", this.options.batchSize, 100)) this.schedule(0);
  }

  private entry(metric: string): MetricEntry {
    const entry = this.config?.metrics.get(metric);
    if (!entry) throw new ParameterError("metric", `'${metric}' is not a metric of the signed config`);
    return entry;
  }

  private record(entry: MetricEntry): MetricRecord {
    const state = this.state as State;
    const name = entry.params.name;
    let record = state.metrics[name];
    if (!record) {
      const cohort = Math.min(Math.floor(this.random.uniforms(1)[0] * entry.params.num_cohorts), entry.params.num_cohorts - 1);
      record = newRecord(entry.params, entry.digest, cohort);
      state.metrics[name] = record;
      this.dirty = true;
    } else if (record.digest !== entry.digest) {
      throw new PolicyError("metric", `'${name}' changed its parameters since this client first reported it`);
    }
    return record;
  }

  private ceiling(metric: string): Ceiling {
    const m = this.options.maxEpsilon;
    const value = typeof m === "number" ? m : (m[metric] ?? m["*"]);
    if (value === undefined) throw new PolicyError("metric", `no ceiling for '${metric}' (maxEpsilon has no "*")`);
    return { epsilon: value, period: this.period };
  }

  /** What each metric has spent and has left. */
  ledger(): Budget[] {
    if (!this.state) return [];
    const now = this.now() / 1000;
    return Object.entries(this.state.metrics).map(([name, record]) => budgetOf(name, record, this.ceiling(name), now));
  }

  /** Reports waiting to leave. */
  pending(): number {
    return this.state?.queue.length ?? 0;
  }

  // --- state ------------------------------------------------------------------------------

  private async open(): Promise<void> {
    let text: string | null = null;
    try {
      text = await this.box.load();
    } catch (e) {
      if (this.options.onCorrupt !== "reset") {
        // Without its ledger the client cannot keep its promises: it reports nothing this session.
        this.stopped = `${(e as Error).message}: reporting is stopped (onCorrupt: "reset" starts a new state)`;
        this.event("storage_error", null, this.stopped);
        return;
      }
      this.event("storage_error", null, `${(e as Error).message}; starting a new state (onCorrupt: "reset")`);
    }
    const state: State = text ? JSON.parse(text) : {
      version: 1, secret: b64e(this.random.bytes(32)), config: null, learned: [], metrics: {}, pending: [], queue: [],
    };
    state.pending.push(...this.early);
    this.early = [];
    this.state = state;
    this.dirty = !text;
    if (state.config) {
      try {
        this.config = this.verify(parseJson(state.config));
      } catch {
        this.config = null;
      }
    }
    this.drainPending();
  }

  /** Write the state if it changed; false when the storage failed (the client goes on in memory). */
  private async save(): Promise<boolean> {
    if (!this.state || !this.dirty) return true;
    this.dirty = false;
    try {
      await this.box.save(JSON.stringify(this.state));
      return true;
    } catch (e) {
      this.dirty = true;
      this.event("storage_error", null, (e as Error).message);
      return false;
    }
  }

  // --- config, rounds, clocks -------------------------------------------------------------

  private trusted(): Uint8Array[] {
    return [...this.pins, ...(this.state?.learned ?? []).map((k) => b64d(k, "learned"))];
  }

  private verify(document: ReturnType<typeof parseJson>): Config {
    return verifyConfig(document, keyFor(document, this.trusted()));
  }

  /** Fetch, verify and adopt the signed config; follow its rounds. Never throws; false when it failed. */
  async sync(): Promise<boolean> {
    if (this.options.disabled) return false;
    await this.ready;
    if (this.stopped) return false;
    try {
      const response = await this.request("/v1/config", { method: "GET" });
      const text = await response.text();
      if (!response.ok) throw new TransportError(`config: HTTP ${response.status}`, response.status);
      const document = parseJson(text);
      const config = this.verify(document);
      this.adopt(text, config);
      this.syncFailed = false;
      return true;
    } catch (e) {
      this.event("transport_error", null, `sync: ${(e as Error).message}`);
      this.syncFailed = true;
      return false;
    } finally {
      // after a failure, again within a minute (a round opened meanwhile is joined soon after the network returns)
      const interval = this.syncFailed ? 60 : this.config?.sync_interval ?? positive("syncInterval", this.options.syncInterval, 3600);
      this.nextSyncAt = this.mono() + 1000 * interval;
    }
  }

  private adopt(text: string, config: Config): void {
    const state = this.state as State;
    if (this.config && config.issued_at < this.config.issued_at) {
      this.event("stale_config", null, `config issued at ${config.issued_at} is older than the kept one`);
      return;
    }
    const first = this.config === null;
    state.config = text;
    this.config = config;
    this.dirty = true;
    const signer = keyId(config.sign_public);
    const learned = state.learned.filter((k) => keyId(b64d(k, "learned")) === signer);
    const next = config.next_sign_public;
    if (next && !this.pins.some((p) => keyId(p) === keyId(next)) && !learned.includes(b64e(next))) {
      learned.push(b64e(next));
      this.event("sign_key_learned", null, `trusting signing key id ${keyId(next)}, announced by key id ${signer}`);
    }
    state.learned = learned;
    this.event("config", null, `config issued at ${config.issued_at} (${config.metrics.size} metrics)`);
    if (first) this.drainPending();
    this.followRounds(config);
  }

  private drainPending(): void {
    if (!this.state || !this.config) return;
    const waiting = this.state.pending.splice(0);
    for (const p of waiting) {
      try {
        this.reportAt(p.metric, p.value, p.at);
      } catch (e) {
        this.event("refused", p.metric, (e as Error).message);
      }
      this.dirty = true;
    }
  }

  private followRounds(config: Config): void {
    const state = this.state as State;
    const now = this.now() / 1000;
    for (const round of [...config.rounds].sort((a, b) => a.round_id - b.round_id)) {
      const record = state.metrics[round.metric];
      if (!record || record.digest !== round.params_digest || round.round_id <= record.round) continue;
      if (round.cohorts && !round.cohorts.includes(record.cohort)) continue;
      if (round.expires_at <= now) continue;
      try {
        this.join(round, config.metrics.get(round.metric) as MetricEntry, record);
        this.event("round_joined", round.metric, `round ${round.round_id}: level ${round.level_to}`);
      } catch (e) {
        this.event("round_refused", round.metric, `round ${round.round_id}: ${(e as Error).message}`);
      }
    }
  }

  /** Relax the metric for `round` (the ledger's checks first) and re-send the current window's value. */
  private join(round: RoundAnnouncement, entry: MetricEntry, record: MetricRecord): void {
    const params = entry.params;
    const irr: Irr | null = round.irr_q === null ? null : [round.irr_p, round.irr_q];
    if (irr) irrGarbling(irrLevel(withIrr(params, record.irr)), irrLevel(withIrr(params, irr))); // a relaxation only
    if (this.options.acceptRound && !this.options.acceptRound(round)) {
      throw new PolicyError("round", "the app did not accept the round");
    }
    const changesIrr = irr !== null && (irr[0] !== record.irr[0] || irr[1] !== record.irr[1]);
    if (round.level_to === record.level && !changesIrr) {
      record.round = round.round_id; // nothing moves: later reports carry the round
      this.dirty = true;
      return;
    }
    const ceiling = this.ceiling(round.metric);
    settle(record, ceiling, windowStart(this.now() / 1000, params.time_precision)); // past windows are final
    const current = record.current ? { ...record.current, levels: [...record.current.levels] } : null;
    const relaxed = resendRelaxed(record, params, round.level_to, irr);
    const before = current ? withIrr(params, current.irrs[current.irrs.length - 1]) : null;
    chargeRelaxation(record, params, ceiling, round.level_to, round.round_id, irr, relaxed);
    this.dirty = true;
    if (!current || !record.current) return;
    const w = { secret: b64d((this.state as State).secret, "secret"), params: withIrr(params, record.irr),
      cohort: record.cohort, window: current.window, value: this.valueOf(current.value) };
    const chain = [...current.levels, round.level_to];
    const payload = relaxed && current.sent !== null && before
      ? relaxedPayload(w, chain, unpackBits(fromHex(current.sent), params.num_bits), before, (n) => this.random.bytes(n))
      : reportPayload(w, chain, this.random.uniforms(params.num_bits));
    record.current.sent = toHex(payload.slice(PAYLOAD_HEADER_BYTES));
    this.enqueue({ metric: round.metric, digest: entry.digest, round: round.round_id, window: current.window,
      payload: b64e(payload), notBefore: 0 });
  }

  private valueOf(key: string): string | string[] {
    const bytes = b64d(key, "value");
    const view = new DataView(bytes.buffer, bytes.byteOffset);
    const out: string[] = [];
    for (let i = 0, at = 5; i < view.getUint32(1); i++) {
      const size = view.getUint32(at);
      out.push(new TextDecoder().decode(bytes.slice(at + 4, at + 4 + size)));
      at += 4 + size;
    }
    return out.length === 1 ? out[0] : out;
  }

  /** Waits and schedules run on the monotonic clock: a wall clock moved back never freezes them. */
  private mono(): number {
    return (this.options.monotonic ?? (() => performance.now()))();
  }

  /** The wall clock, corrected by the server's when the device's is off by more than two minutes. */
  private now(): number {
    return (this.options.clock ?? Date.now)() + this.offsetMs;
  }

  private learnClock(serverSeconds: number | null): void {
    if (serverSeconds === null || !Number.isFinite(serverSeconds)) return;
    const device = (this.options.clock ?? Date.now)();
    const diff = serverSeconds * 1000 - device;
    const offset = Math.abs(diff) > SKEW_MS ? diff : 0;
    if ((offset === 0) !== (this.offsetMs === 0)) {
      this.event("clock_skew", null, offset ? `the device clock is off by ${Math.round(diff / 1000)} s: using the server's`
        : "the device clock agrees with the server's again");
    }
    this.offsetMs = offset;
  }

  private async request(path: string, init: RequestInit): Promise<Response> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 30_000);
    try {
      const response = await this.fetchFn(this.url + path, { ...init, signal: controller.signal });
      const date = response.headers.get("date");
      if (date) this.learnClock(Date.parse(date) / 1000);
      return response;
    } catch (e) {
      throw new TransportError(`${path}: ${(e as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }

  // --- sending ----------------------------------------------------------------------------

  /**
   * Persist, seal and send what is due, within `deadline` seconds (default `exitDeadline`).
   * Never throws; resolves with what was sent and what is left.
   */
  async flush(options: { deadline?: number; keepalive?: boolean } = {}): Promise<{ sent: number; left: number }> {
    if (this.options.disabled) return { sent: 0, left: 0 };
    const deadline = 1000 * (options.deadline ?? positive("exitDeadline", this.options.exitDeadline, 2));
    let sent = 0;
    const work = (async () => {
      await this.ready;
      if (!this.config) await this.sync();
      sent = await this.sendDue(options.keepalive ?? false, true);
    })();
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([work.catch(() => undefined), new Promise((r) => { timer = setTimeout(r, deadline); })]);
    clearTimeout(timer);
    return { sent, left: this.pending() };
  }

  private async seal(item: QueueItem): Promise<void> {
    if (item.envelope || !this.config) return;
    const envelope = await buildReport({ metric: item.metric, params_digest: item.digest, round: item.round,
      window: item.window, payload: b64d(item.payload, "payload"), seal_public: this.config.seal_public });
    item.envelope = envelopeToJson(envelope);
    this.dirty = true;
  }

  /** One pass: seal, persist (a report is durably charged before it leaves), send due batches. */
  private sendDue(keepalive: boolean, force: boolean): Promise<number> {
    const pass = this.sending.then(() => this.sendPass(keepalive, force));
    this.sending = pass.catch(() => undefined);
    return pass;
  }

  private async sendPass(keepalive: boolean, force: boolean): Promise<number> {
    const state = this.state;
    if (!state || !this.config) {
      await this.save();
      return 0;
    }
    if (!force && this.mono() < this.nextSendAt) return 0;
    const now = this.now();
    const cap = 1000 * positive("retryAfterCap", this.options.retryAfterCap, 3600);
    for (const item of state.queue) if (item.notBefore > now + cap) item.notBefore = now + cap; // the clock moved back
    const due = state.queue.filter((i) => i.notBefore <= now);
    for (const item of due) await this.seal(item);
    if (!(await this.save())) return 0; // a report is durably charged before it leaves: nothing leaves yet
    const size = positive("batchSize", this.options.batchSize, 100);
    let sent = 0;
    for (let at = 0; at < due.length; at += size) {
      const done = await this.upload(due.slice(at, at + size), keepalive);
      if (done < 0) break;
      sent += done;
    }
    await this.save();
    return sent;
  }

  /** Upload one batch; the number accepted, or -1 after a failure worth backing off. */
  private async upload(batch: QueueItem[], keepalive: boolean): Promise<number> {
    const body = encodeBatchJson(batch.map((i) => envelopeFromJson(i.envelope as Record<string, unknown>)));
    let response: Response;
    try {
      response = await this.request("/v1/reports", { method: "POST", body, keepalive,
        headers: { "Content-Type": CONTENT_TYPE_JSON, [WIRE_HEADER]: ANSWER_VERSION } });
    } catch (e) {
      return this.backoff((e as Error).message, null);
    }
    if (response.status === 400 || response.status === 413) {
      if (batch.length > 1) {
        const half = batch.length >> 1;
        const a = await this.upload(batch.slice(0, half), keepalive);
        const b = a < 0 ? -1 : await this.upload(batch.slice(half), keepalive);
        return a < 0 || b < 0 ? -1 : a + b;
      }
      this.remove(batch[0]);
      this.event("rejected", batch[0].metric, `HTTP ${response.status}: the report was refused as a whole`);
      return 0;
    }
    if (!response.ok) {
      const retry = Number(response.headers.get("retry-after"));
      return this.backoff(`HTTP ${response.status}`, Number.isFinite(retry) && retry > 0 ? retry : null);
    }
    let answer;
    try {
      answer = parseUploadResponse(await response.json(), batch.length);
    } catch (e) {
      return this.backoff(e instanceof ProtocolError ? e.message : "the upload answer is not JSON", null);
    }
    this.failures = 0;
    this.learnClock(answer.server_time);
    const cap = positive("retryAfterCap", this.options.retryAfterCap, 3600);
    let accepted = 0;
    answer.results.forEach((result, i) => {
      const item = batch[i];
      if (result.status === "accepted" || result.status === "replayed") {
        this.remove(item);
        accepted++;
      } else if (result.retry_after !== null) {
        item.notBefore = this.now() + 1000 * Math.min(result.retry_after, cap);
        this.event("retry_later", item.metric, `${result.status}: kept, resent in ${Math.min(result.retry_after, cap)} s`);
      } else {
        this.remove(item);
        this.event("rejected", item.metric, `${result.status}${result.field ? ` (${result.field})` : ""}`);
      }
    });
    this.dirty = true;
    if (accepted) this.event("sent", null, `${accepted} report(s) accepted`);
    if (answer.clipped) {
      this.event("clipped", null, `${answer.clipped} delivered report(s) kept only their metric's max_items items `
        + "(clipped by the aggregator)");
    }
    return accepted;
  }

  private remove(item: QueueItem): void {
    const queue = (this.state as State).queue;
    const at = queue.indexOf(item);
    if (at >= 0) queue.splice(at, 1);
  }

  private backoff(why: string, retryAfter: number | null): number {
    this.failures++;
    const cap = 1000 * positive("retryAfterCap", this.options.retryAfterCap, 3600);
    const exp = Math.min(MAX_BACKOFF_MS, 1000 * 2 ** Math.min(this.failures, 20));
    const wait = retryAfter !== null ? Math.min(1000 * retryAfter, cap) : exp * (0.5 + 0.5 * this.random.uniforms(1)[0]);
    this.nextSendAt = this.mono() + wait;
    this.event("transport_error", null, `${why}; retrying in ${Math.round(wait / 1000)} s`);
    return -1;
  }

  // --- background -------------------------------------------------------------------------

  private schedule(delayMs: number): void {
    if (this.closed || this.options.background === false) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.turn(), delayMs);
    (this.timer as { unref?: () => void }).unref?.();
  }

  private async turn(): Promise<void> {
    this.timer = null;
    if (this.running) return;
    this.running = (async () => {
      try {
        await this.ready;
        const wasFailing = this.failures > 0;
        if (!this.config || this.mono() >= this.nextSyncAt) await this.sync();
        await this.sendDue(false, false);
        if (wasFailing && this.failures === 0) await this.sync(); // back online: catch up with rounds
      } catch (e) {
        this.event("transport_error", null, (e as Error).message);
      }
    })();
    await this.running;
    this.running = null;
    this.schedule(1000 * positive("sendInterval", this.options.sendInterval, 5));
  }

  /** Stop the background sender and flush within `deadline` seconds (default `exitDeadline`). Never throws. */
  async close(options: { deadline?: number } = {}): Promise<{ sent: number; left: number }> {
    if (this.closed) return { sent: 0, left: this.pending() };
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    if (typeof document !== "undefined") document.removeEventListener("visibilitychange", this.onHide);
    if (typeof window !== "undefined") window.removeEventListener("pagehide", this.onHide);
    if (this.running) await this.running.catch(() => undefined);
    return this.flush(options);
  }

  private event(type: EventType, metric: string | null, detail: string): void {
    try {
      this.options.onEvent?.({ type, metric, detail });
      const log = this.options.logger;
      const line = `onesided: ${type}${metric ? ` ${metric}` : ""}: ${detail}`;
      const warn = ["transport_error", "storage_error", "rejected", "clipped"].includes(type);
      if (warn) log?.warn?.(line);
      else log?.debug?.(line);
    } catch {
      // an app's handler that throws must not break the client
    }
  }
}
