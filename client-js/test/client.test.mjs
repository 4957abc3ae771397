// The client's lifecycle against a fake aggregator: offline first, never throwing, statuses,
// retries and clock answers, rounds, encrypted persistence, close().
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as os from "../dist/index.js";
import { FileStorage } from "../dist/node.js";
import { FakeServer, metric } from "./fake-server.mjs";

function client(server, extra = {}) {
  const events = [];
  const c = new os.Client({ serverUrl: "https://agg.test", serverPublicKeys: server.publicKey, maxEpsilon: 10,
    fetch: server.fetch, background: false, onEvent: (e) => events.push(e), ...extra });
  return { c, events };
}

test("offline first launch: report() waits, never throws, and goes out once online", async () => {
  const server = new FakeServer();
  server.online = false;
  const { c, events } = client(server);
  assert.deepEqual(c.report("places", ["home", "work"]), { status: "waiting" });
  assert.deepEqual(c.report("places", ["home", "work"]), { status: "waiting" }, "the same call is kept once");
  assert.equal(await c.sync(), false);
  assert.ok(events.some((e) => e.type === "transport_error"));
  server.online = true;
  const { sent, left } = await c.flush();
  assert.equal(sent, 1);
  assert.equal(left, 0);
  const [{ batch, headers }] = server.batches;
  assert.equal(headers["Onesided-Wire"], "3");
  assert.equal(batch.reports[0].metric, "places");
  assert.equal(batch.reports[0].window % 3600, 0);
  assert.deepEqual(c.ledger().map((b) => [b.metric, b.spent]), [["places", 2]]);
});

test("statuses: repeated, refused (another value, budget, unknown metric), disabled; strict throws", async () => {
  const server = new FakeServer();
  const { c } = client(server, { maxEpsilon: 2 });
  await c.sync();
  assert.equal(c.report("places", "home").status, "queued");
  assert.equal(c.report("places", "home").status, "repeated");
  assert.equal(c.report("places", "work").status, "refused");
  assert.equal(c.report("nope", "x").status, "refused");
  assert.equal(c.report("places", 42).status, "refused");
  const strict = client(server, { strict: true }).c;
  await strict.sync();
  assert.throws(() => strict.report("nope", "x"), (e) => e instanceof os.ParameterError && e.field === "metric");
  const off = client(server, { disabled: true }).c;
  assert.equal(off.report("places", "home").status, "disabled");
  let hour = Date.UTC(2030, 0, 1);
  const later = client(server, { maxEpsilon: 2, clock: () => hour }).c;
  await later.sync();
  assert.equal(later.report("places", "a").status, "queued");
  hour += 3_600_000;
  const refused = later.report("places", "a");
  assert.equal(refused.status, "refused", "the second window passes the ceiling of 2");
  assert.match(refused.reason, /costs 2/);
});

test("clock answers: retry_after keeps the report (capped), a final status drops it", async () => {
  const server = new FakeServer();
  const { c, events } = client(server, { retryAfterCap: 60 });
  await c.sync();
  c.report("places", "home");
  server.answer = () => ({ status: "too_early", field: "window", detail: "starts in the future", retry_after: 1_000_000 });
  assert.equal((await c.flush()).left, 1);
  assert.ok(events.some((e) => e.type === "retry_later" && /in 60 s/.test(e.detail)));
  server.answer = null;
  assert.equal((await c.flush()).sent, 0, "not before the wait");
  const id = server.batches[0].batch.reports[0].report_id;
  server.answer = () => ({ status: "expired", field: "window", detail: "old" });
  const { c: other } = client(server);
  await other.sync();
  other.report("places", "x");
  assert.equal((await other.flush()).left, 0);
  assert.ok(id.length === 22);
});

test("wire version 3: a clipped count in the answer is an event and a logger warning, the reports delivered", async () => {
  const server = new FakeServer();
  const warnings = [];
  const { c, events } = client(server, { logger: { warn: (line) => warnings.push(line) } });
  await c.sync();
  c.report("places", ["home", "work", "gym"]);
  server.clipped = 1;
  assert.deepEqual(await c.flush(), { sent: 1, left: 0 });
  assert.equal(server.batches[0].headers["Onesided-Wire"], "3");
  const clipped = events.filter((e) => e.type === "clipped");
  assert.equal(clipped.length, 1);
  assert.match(clipped[0].detail, /^1 delivered report\(s\) kept only their metric's max_items items/);
  assert.ok(warnings.some((line) => line.startsWith("onesided: clipped: 1 delivered")));
  server.clipped = 0;
  const { c: other, events: otherEvents } = client(server);
  await other.sync();
  other.report("places", ["home"]);
  assert.deepEqual(await other.flush(), { sent: 1, left: 0 });
  assert.ok(!otherEvents.some((e) => e.type === "clipped"), "no event when none was clipped");
});

test("a wait decided by the server survives the clock moving back days: at most the cap", async () => {
  const server = new FakeServer();
  let now = Date.UTC(2030, 0, 10);
  const { c } = client(server, { retryAfterCap: 60, clock: () => now });
  await c.sync();
  c.report("places", "home");
  server.answer = () => ({ status: "too_early", field: "window", detail: "ahead", retry_after: 60 });
  assert.equal((await c.flush()).left, 1);
  server.answer = null;
  now -= 3 * 86_400_000; // the device clock is set back three days
  assert.equal((await c.flush()).sent, 0, "not at once");
  now += 61_000;
  assert.equal((await c.flush()).sent, 1, "after the cap, not after three days");
});

test("a failed sync is retried within a minute, not after the config's hour", async () => {
  const server = new FakeServer();
  let mono = 0;
  const { c } = client(server, { monotonic: () => mono, background: false });
  await c.sync();
  server.online = false;
  mono += 3_600_001;
  assert.equal(await c.sync(), false);
  server.online = true;
  const before = server.requests.filter((r) => r.url.endsWith("/v1/config")).length;
  mono += 61_000;
  await c["turn"]();
  assert.equal(server.requests.filter((r) => r.url.endsWith("/v1/config")).length, before + 1);
});

test("a 400 on a batch isolates the bad report instead of dropping the queue", async () => {
  const server = new FakeServer({ metrics: [metric("a"), metric("b"), metric("c")] });
  const { c, events } = client(server);
  await c.sync();
  for (const m of ["a", "b", "c"]) c.report(m, "v");
  server.answer = (r, i, batch) => (batch.reports.some((x) => x.metric === "b") && batch.reports.length >= 1
    && batch.reports.find((x) => x.metric === "b") ? { httpStatus: 400 } : null);
  const { sent, left } = await c.flush();
  assert.equal(sent, 2);
  assert.equal(left, 0);
  assert.deepEqual(events.filter((e) => e.type === "rejected").map((e) => e.metric), ["b"]);
});

test("flushes at the same time seal each report once: one id, never two", async () => {
  const server = new FakeServer();
  const { c } = client(server);
  await c.sync();
  c.report("places", "home");
  const results = await Promise.all([c.flush(), c.flush(), c.flush()]);
  assert.equal(results.reduce((n, r) => n + r.sent, 0), 1);
  const ids = new Set(server.batches.flatMap((b) => b.batch.reports.map((r) => r.report_id)));
  assert.equal(ids.size, 1);
});

test("5xx and Retry-After: kept, backoff capped, nothing thrown", async () => {
  const server = new FakeServer();
  const { c, events } = client(server, { retryAfterCap: 30 });
  await c.sync();
  c.report("places", "home");
  server.answer = () => ({ httpStatus: 503, headers: { "retry-after": "1000000000" } });
  assert.equal((await c.flush()).left, 1);
  assert.ok(events.some((e) => e.type === "transport_error" && /retrying in 30 s/.test(e.detail)));
});

test("rounds: a relaxation round re-sends the window's value at the new level, charged as the reference", async () => {
  const server = new FakeServer();
  const { c, events } = client(server);
  await c.sync();
  c.report("places", ["home"]);
  server.openRound("places", 2.0, 4.0);
  await c.sync();
  assert.ok(events.some((e) => e.type === "round_joined"));
  await c.flush();
  const reports = server.batches.flatMap((b) => b.batch.reports);
  assert.deepEqual(reports.map((r) => r.round), [0, 1]);
  assert.deepEqual(c.ledger().map((b) => [b.spent, b.level, b.round]), [[4, 4, 1]]); // k * 4 / 2
  server.openRound("places", 2.0, 3.0, 2);
  await c.sync();
  assert.ok(events.some((e) => e.type === "round_refused" && /cannot go from level 4 down to 3/.test(e.detail)));
});

test("a round opened after the window passed re-sends nothing: past windows are final", async () => {
  let now = Date.UTC(2030, 0, 1, 10, 30);
  const server = new FakeServer({ now: () => now });
  const { c } = client(server, { clock: () => now });
  await c.sync();
  c.report("places", "home");
  now += 3_600_000; // the next hour
  server.openRound("places", 2.0, 4.0);
  await c.sync();
  await c.flush();
  assert.deepEqual(server.batches.flatMap((b) => b.batch.reports).map((r) => r.round), [0]);
  assert.deepEqual(c.ledger().map((b) => [b.spent, b.level, b.round]), [[2, 4, 1]]);
});

test("symmetric and IRR rounds: re-sends charged as the reference's enclosures, relaxed IRR drawn from the last report", async () => {
  const F = (x) => new os.JsonFloat(x);
  const server = new FakeServer({ metrics: [metric("s", { mode: "symmetric", irr_p: F(0.25), irr_q: F(0.75),
    value_kind: "categorical" })] });
  const { c, events } = client(server);
  await c.sync();
  c.report("s", "home");
  server.openRound("s", 2.0, 3.0);
  await c.sync();
  const m = server.metrics[0];
  server.rounds.push(server.sign({ version: 1, round_id: 2, metric: "s", params_digest: server.digest(m),
    level_from: F(3.0), level_to: F(3.0), cohorts: null, opened_at: 0, expires_at: 4_000_000_000,
    irr_p: F(0.2), irr_q: F(0.8) }));
  server.issuedAt++;
  await c.sync();
  assert.deepEqual(events.filter((e) => e.type.startsWith("round")).map((e) => e.type), ["round_joined", "round_joined"]);
  await c.flush();
  assert.deepEqual(server.batches.flatMap((b) => b.batch.reports).map((r) => r.round), [0, 1, 2]);
  const params = os.metricParams(os.parseJson(os.canonicalJson(m)));
  const relaxed = os.resendRelaxed({ ...c.ledger()[0], current: { levels: [2, 3], irrs: [[0.25, 0.75], [0.25, 0.75]],
    relaxed: [false], sent: "00" } }, params, 3, [0.2, 0.8]);
  const expected = os.windowMicro(params, [2, 3, 3], [[0.25, 0.75], [0.25, 0.75], [0.2, 0.8]], [false, relaxed]);
  assert.equal(Math.round(c.ledger()[0].spent * 1e6), expected);
  server.rounds.push(server.sign({ version: 1, round_id: 3, metric: "s", params_digest: server.digest(m),
    level_from: F(3.0), level_to: F(3.0), cohorts: null, opened_at: 0, expires_at: 4_000_000_000,
    irr_p: F(0.3), irr_q: F(0.7) }));
  server.issuedAt++;
  await c.sync();
  assert.ok(events.some((e) => e.type === "round_refused" && /post-processing/.test(e.detail)), "an IRR that tightens");
});

test("state: encrypted in files (0600), the ledger survives a restart, a second value in the window is refused", async () => {
  const dir = mkdtempSync(join(tmpdir(), "onesided-js-"));
  const server = new FakeServer();
  server.online = false;
  const storage = new FileStorage(join(dir, "state.bin"));
  const first = client(server, { storage }).c;
  first.report("places", "secret-place");
  await first.close();
  const blob = readFileSync(join(dir, "state.bin"));
  assert.ok(!blob.includes(Buffer.from("secret-place")), "the state is encrypted");
  assert.equal(statSync(join(dir, "state.bin.key")).mode & 0o777, 0o600);
  server.online = true;
  const second = client(server, { storage: new FileStorage(join(dir, "state.bin")) }).c;
  assert.equal((await second.flush()).sent, 1, "the waiting report survived the restart");
  assert.equal(second.report("places", "other").status, "refused");
  assert.equal(second.report("places", "secret-place").status, "repeated");
});

test("a state that does not decrypt stops reporting (the ledger is not silently reset), unless onCorrupt: reset", async () => {
  const server = new FakeServer();
  const storage = new os.MemoryStorage();
  const first = client(server, { storage }).c;
  await first.sync();
  first.report("places", "home");
  await first.close();
  await storage.write("key", new Uint8Array(32).fill(7)); // another key
  const { c, events } = client(server, { storage });
  assert.equal(await c.sync(), false);
  const outcome = c.report("places", "work");
  assert.equal(outcome.status, "refused");
  assert.match(outcome.reason, /does not decrypt/);
  assert.ok(events.some((e) => e.type === "storage_error"));
  const reset = client(server, { storage, onCorrupt: "reset" }).c;
  await reset.sync();
  assert.equal(reset.report("places", "work").status, "queued");
});

test("a storage that fails: reports still work, nothing leaves before it is written", async () => {
  const server = new FakeServer();
  const broken = { read: async () => null, write: async () => { throw new Error("disk full"); } };
  const { c, events } = client(server, { storage: broken });
  await c.sync();
  assert.equal(c.report("places", "home").status, "queued");
  const { sent, left } = await c.flush();
  assert.equal(sent, 0);
  assert.equal(left, 1);
  assert.ok(events.some((e) => e.type === "storage_error"));
});

test("a signing-key rotation is followed; a config from an unknown key is refused", async () => {
  const server = new FakeServer();
  const { c, events } = client(server);
  await c.sync();
  const { ed25519 } = await import("@noble/curves/ed25519");
  const next = ed25519.utils.randomPrivateKey();
  const original = server.configText.bind(server);
  server.configText = () => {
    const doc = JSON.parse(original());
    const pk = ed25519.getPublicKey(next);
    doc.payload.aggregator.next_sign_public = os.b64e(pk);
    doc.payload.aggregator.next_sign_key_id = os.keyId(pk);
    doc.payload.issued_at += 10;
    return os.canonicalJson(server.sign(os.parseJson(JSON.stringify(doc.payload).replace(/"level":2([,}])/g, '"level":2.0$1'))));
  };
  assert.equal(await c.sync(), true);
  assert.ok(events.some((e) => e.type === "sign_key_learned"));
  server.signKey = next;
  server.configText = () => {
    const doc = JSON.parse(original());
    return os.canonicalJson(server.sign(os.parseJson(JSON.stringify({ ...doc.payload, issued_at: doc.payload.issued_at + 20 })
      .replace(/"level":2([,}])/g, '"level":2.0$1').replace(/"current_level":2([,}])/g, '"current_level":2.0$1'))));
  };
  assert.equal(await c.sync(), true, "the announced key signs after the switch");
  server.signKey = ed25519.utils.randomPrivateKey();
  assert.equal(await c.sync(), false);
});
