// The pure layer against every vector the Python reference writes (tests/vectors/*.json).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as os from "../dist/index.js";

const vectors = new URL("../../tests/vectors/", import.meta.url);
const load = (name) => JSON.parse(readFileSync(new URL(name, vectors), "utf8"));
// The same file with number spellings kept (2.0 stays a float): what signatures and digests cover.
const loadExact = (name) => os.parseJson(readFileSync(new URL(name, vectors), "utf8"));
const hex = os.fromHex;
const utf8 = (s) => new TextEncoder().encode(s);
const level = (v) => (v === "inf" ? Infinity : v);

test("bloom_bits.json: mmh3 and rappor-md5 indices", () => {
  const { cases } = load("bloom_bits.json");
  assert.ok(cases.length > 100);
  for (const c of cases) {
    assert.deepEqual(os.bloomBits(hex(c.value_hex), c.cohort, c.num_bits, c.num_hashes, c.hashing), c.bits,
      JSON.stringify(c));
  }
});

test("canonical_value.json", () => {
  for (const c of load("canonical_value.json").cases) {
    assert.equal(os.toHex(os.canonicalValue(c.members)), c.canonical_hex);
  }
});

test("noise.json: HMAC-SHA256 seeds, SHAKE-256 words and uniforms", () => {
  for (const c of load("noise.json").cases) {
    const seed = os.noiseSeed(hex(c.secret_hex), c.metric, hex(c.canonical_value_hex), c.step);
    assert.equal(os.toHex(seed), c.seed_hex);
    if (c.uniforms) {
      const u = os.keyedUniforms(seed, c.uniforms.length);
      assert.deepEqual(Array.from(u), c.uniforms);
    }
  }
});

test("params_digest.json: canonical JSON and digests", () => {
  for (const c of loadExact("params_digest.json").cases) {
    assert.equal(os.canonicalJson(c.params), c.canonical_json);
    assert.equal(os.paramsDigest(os.metricParams(c.params)), c.digest);
  }
});

test("payloads.json", () => {
  for (const c of load("payloads.json").cases) {
    const bits = new Uint8Array(c.num_bits);
    for (const i of c.ones) bits[i] = 1;
    const payload = new Uint8Array([...os.payloadHeader(c.cohort, level(c.level)), ...os.packBits(bits)]);
    assert.equal(os.toHex(payload), c.payload_hex);
  }
});

test("sealed_report.json: AAD, X25519/HKDF/AES-128-GCM, JSON and binary batches", async () => {
  const v = load("sealed_report.json");
  const eph = os.ephemeralKey(hex(v.ephemeral_private_hex));
  assert.equal(os.toHex(eph.publicKey), v.ephemeral_public_hex);
  assert.equal(os.toHex(os.sealedReportId(eph.publicKey)), v.report_id_hex);
  const aad = os.reportAad(hex(v.report_id_hex), v.metric, v.params_digest, v.round, v.window);
  assert.equal(os.toHex(aad), v.aad_hex);
  const { key, nonce } = os.sealingKey(eph, hex(v.recipient_public_hex));
  assert.equal(os.toHex(key), v.key_hex);
  assert.equal(os.toHex(nonce), v.nonce_hex);
  const env = await os.buildReport({ metric: v.metric, params_digest: v.params_digest, round: v.round,
    window: v.window, payload: hex(v.payload_hex), seal_public: hex(v.recipient_public_hex), ephemeral: eph });
  assert.equal(os.toHex(env.sealed), v.envelope_hex);
  const batch = JSON.parse(os.encodeBatchJson([env]));
  assert.deepEqual(batch.reports[0], v.batch_json.reports[0]);
  const binary = os.toHex(os.encodeBatchBinary([env]));
  // The vector's binary batch holds this sealed report and a plain one; the sealed record is a prefix.
  const sealedRecord = binary.slice(18);
  assert.ok(v.batch_binary_hex.startsWith("4f4e534201"));
  assert.ok(v.batch_binary_hex.slice(18).startsWith(sealedRecord));
});

test("a report sealed with a fresh key (Web Crypto's X25519 where present) opens with the recipient's key", async () => {
  const { x25519 } = await import("@noble/curves/ed25519");
  const recipientPrivate = x25519.utils.randomPrivateKey();
  const recipient = x25519.getPublicKey(recipientPrivate);
  const payload = new Uint8Array([1, 0, 3, 64, 0, 0, 0, 0, 0, 0, 0, 255]);
  const digest = "ab".repeat(32);
  const env = await os.buildReport({ metric: "m", params_digest: digest, round: 0, window: 3600, payload, seal_public: recipient });
  const pkE = env.sealed.slice(0, 32);
  assert.deepEqual(env.report_id, os.sealedReportId(pkE));
  const shared = x25519.getSharedSecret(recipientPrivate, pkE);
  const { hkdf } = await import("@noble/hashes/hkdf");
  const { sha256 } = await import("@noble/hashes/sha2");
  const okm = hkdf(sha256, shared, undefined, new Uint8Array([...new TextEncoder().encode("onesided/seal/v1"), ...pkE, ...recipient]), 28);
  const k = await crypto.subtle.importKey("raw", okm.slice(0, 16), "AES-GCM", false, ["decrypt"]);
  const plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv: okm.slice(16, 28),
    additionalData: os.reportAad(env.report_id, "m", digest, 0, 3600) }, k, env.sealed.slice(32));
  assert.deepEqual(new Uint8Array(plain), payload);
});

test("signature.json: canonical JSON with floats, Ed25519", () => {
  const v = load("signature.json");
  const doc = loadExact("signature.json").document;
  assert.equal(os.canonicalJson(doc.payload), v.canonical_json);
  os.verifyDocument(doc, hex(v.public_hex));
  assert.equal(os.keyId(hex(v.public_hex)), v.key_id);
});

test("floatRepr follows Python's repr", () => {
  const cases = [[1, "1.0"], [0.5, "0.5"], [1e-4, "0.0001"], [123.25, "123.25"], [1e-5, "1e-05"],
    [1.5e-7, "1.5e-07"], [1e16, "1e+16"], [-0, "-0.0"], [1 / 3, "0.3333333333333333"], [9999999999999998, "9999999999999998.0"],
    [1.7976931348623157e308, "1.7976931348623157e+308"], [5e-324, "5e-324"], [123456789012345.6, "123456789012345.6"]];
  for (const [x, text] of cases) assert.equal(os.floatRepr(x), text);
});

test("reports.json: every kind of report, byte for byte", () => {
  const { cases } = loadExact("reports.json");
  let count = 0;
  for (const c of cases) {
    const base = os.metricParams(c.params);
    const secret = hex(c.secret_hex);
    let sent = null;
    let before = null;
    const chain = [];
    for (const raw of c.reports) {
      const r = os.plain(raw);
      chain.push(level(r.level));
      const params = os.withIrr(base, r.irr);
      const w = { secret, params, cohort: c.cohort, window: c.window, value: c.value };
      let payload;
      if (r.kind === "relaxed") {
        const tape = hex(r.bytes_hex);
        let at = 0;
        const bytes = (n) => tape.slice(at, (at += n));
        payload = os.relaxedPayload(w, chain, sent, before, bytes);
        assert.equal(at, tape.length, "every recorded byte consumed");
      } else {
        payload = os.reportPayload(w, chain, Float64Array.from(r.uniforms));
      }
      const m = base.num_bits;
      const perm = os.permanentBits(secret, params, os.encodeValue(params, c.value, c.cohort),
        os.noiseKey(c.window, os.canonicalValue(c.value)), chain);
      assert.equal(os.toHex(os.packBits(perm)), r.permanent_hex, `${base.name} ${r.kind} permanent`);
      assert.equal(os.toHex(payload), r.payload_hex, `${base.name} ${r.kind} at ${chain}`);
      sent = os.unpackBits(payload.slice(11), m);
      before = params;
      count++;
    }
  }
  assert.equal(count, 19);
});

test("configs.json: a signed config, its rotation, and refusals naming the field", () => {
  const v = load("configs.json");
  const pinned = hex(v.pinned_sign_public_hex);
  const rotating = os.parseJson(v.rotating);
  const config = os.verifyConfig(rotating, os.keyFor(rotating, [pinned]));
  assert.equal(os.toHex(config.next_sign_public), v.next_sign_public_hex);
  assert.equal(config.rounds[0].level_to, 2);
  assert.equal(config.sync_interval, 600);
  const rotated = os.parseJson(v.rotated);
  assert.throws(() => os.keyFor(rotated, [pinned]), (e) => e.field === "key_id");
  const after = os.verifyConfig(rotated, os.keyFor(rotated, [pinned, config.next_sign_public]));
  assert.equal(after.issued_at, 1700000200);
  for (const r of v.refused) {
    const doc = os.parseJson(r.text);
    assert.throws(() => os.verifyConfig(doc, os.keyFor(doc, [pinned])), (e) => e.field === r.field, r.why);
  }
});

test("answers.json: upload answers of wire versions 1, 2 and 3, and refusals naming the field", () => {
  const v = load("answers.json");
  assert.deepEqual(new Set(v.cases.map((c) => c.wire)), new Set([1, 2, 3]));
  for (const c of v.cases) {
    assert.deepEqual(os.parseUploadResponse(JSON.parse(c.text), c.count), c.expect, c.why);
  }
  for (const r of v.refused) {
    assert.throws(() => os.parseUploadResponse(JSON.parse(r.text), r.count),
      (e) => e instanceof os.ProtocolError && e.field === r.field, r.why);
  }
});
