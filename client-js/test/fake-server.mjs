// A fake aggregator for the client's unit tests: a signed config (keys made here), and an upload
// endpoint whose answers a test programs. Only what the client uses; the real server is in e2e.
import { ed25519, x25519 } from "@noble/curves/ed25519";
import * as os from "../dist/index.js";

const utf8 = (s) => new TextEncoder().encode(s);
const F = (x) => new os.JsonFloat(x);

export function metric(name, overrides = {}) {
  return {
    version: 1, name, encoding: { kind: "bloom", num_bits: 32, num_hashes: 2, num_cohorts: 4, hashing: "mmh3" },
    mode: "asymmetric", level: F(2.0), irr_p: null, irr_q: null, value_kind: "set", none_value: null,
    time_precision: 3600, min_batch_size: 1, ...overrides,
  };
}

export class FakeServer {
  constructor({ metrics = [metric("places")], now = () => Date.now() } = {}) {
    this.signKey = ed25519.utils.randomPrivateKey();
    this.sealKey = x25519.utils.randomPrivateKey();
    this.metrics = metrics;
    this.rounds = [];
    this.issuedAt = 1_700_000_000;
    this.now = now;
    this.online = true;
    this.batches = [];
    this.answer = null; // (report, i) => result fields, or a Response-like {status, headers}
    this.clipped = null; // a number: the answer's `clipped` (wire version 3), as for a trusted set metric
    this.requests = [];
  }

  get publicKey() {
    return os.b64e(ed25519.getPublicKey(this.signKey));
  }

  sign(payload) {
    const pk = ed25519.getPublicKey(this.signKey);
    const message = new Uint8Array([...utf8("onesided/sign/v1"), ...utf8(os.canonicalJson(payload))]);
    return { payload, key_id: os.keyId(pk), signature: os.b64e(ed25519.sign(message, this.signKey)) };
  }

  digest(m) {
    return os.paramsDigest(os.metricParams(m));
  }

  openRound(name, levelFrom, levelTo, roundId = 1) {
    const m = this.metrics.find((x) => x.name === name);
    this.rounds.push(this.sign({ version: 1, round_id: roundId, metric: name, params_digest: this.digest(m),
      level_from: F(levelFrom), level_to: F(levelTo), cohorts: null, opened_at: 0, expires_at: 4_000_000_000 }));
    this.issuedAt++;
  }

  configText() {
    const seal = x25519.getPublicKey(this.sealKey);
    const sign = ed25519.getPublicKey(this.signKey);
    const payload = {
      version: 1, issued_at: this.issuedAt,
      aggregator: { seal_public: os.b64e(seal), seal_key_id: os.keyId(seal), sign_public: os.b64e(sign), sign_key_id: os.keyId(sign) },
      metrics: this.metrics.map((m) => ({ params: m, digest: this.digest(m), current_round: 0, current_level: m.level })),
      rounds: this.rounds,
    };
    return os.canonicalJson(this.sign(payload));
  }

  fetch = async (url, init = {}) => {
    this.requests.push({ url, init });
    if (!this.online) throw new TypeError("fetch failed");
    const headers = new Headers({ date: new Date(this.now()).toUTCString() });
    if (url.endsWith("/v1/config")) return new Response(this.configText(), { status: 200, headers });
    const batch = JSON.parse(init.body);
    this.batches.push({ batch, headers: init.headers });
    const results = [];
    for (const [i, r] of batch.reports.entries()) {
      const programmed = this.answer ? this.answer(r, i, batch) : null;
      if (programmed && programmed.httpStatus) {
        return new Response(JSON.stringify({ error: "x" }), { status: programmed.httpStatus,
          headers: new Headers({ ...Object.fromEntries(headers), ...(programmed.headers ?? {}) }) });
      }
      results.push({ report_id: r.report_id, status: "accepted", field: null, detail: null, ...(programmed ?? {}) });
    }
    const clipped = this.clipped === null ? {} : { clipped: this.clipped };
    return new Response(JSON.stringify({ results, accepted: results.filter((r) => r.status === "accepted").length,
      server_time: Math.floor(this.now() / 1000), ...clipped }), { status: 200, headers });
  };
}
