// Benchmark: Client.report() on the caller's thread, in Node and in Chromium, and the bundle's size.
// Usage: node bench/report-bench.mjs [--reports N] [--chromium /usr/bin/chromium]
// Every report is in a new window (an injected clock advances one hour a call), so each one is a
// full report (encode, keyed noise, IRR, ledger check and charge, queue); the ceiling is finite.
// Printed as JSON; the figures go to benchmarks/RESULTS.md.
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { FakeServer, metric } from "../test/fake-server.mjs";
import * as os from "../dist/index.js";

const args = process.argv.slice(2);
const reports = Number(args[args.indexOf("--reports") + 1] || 5000);
const chromiumPath = args.includes("--chromium") ? args[args.indexOf("--chromium") + 1] : null;
const F = (x) => new os.JsonFloat(x);
const CASES = {
  "Bloom 128 bits, 2 hashes, asymmetric, IRR q .1, a set of 3": [metric("places", {
    encoding: { kind: "bloom", num_bits: 128, num_hashes: 2, num_cohorts: 64, hashing: "mmh3" }, irr_q: F(0.1) }),
  ["home", "work", "gym"]],
  "Bloom 16 bits, 2 hashes, md5, symmetric, IRR p .5 q .75 (RAPPOR's defaults)": [metric("places", {
    encoding: { kind: "bloom", num_bits: 16, num_hashes: 2, num_cohorts: 64, hashing: "rappor-md5" },
    mode: "symmetric", level: F(1.3862943611198906), irr_p: F(0.5), irr_q: F(0.75), value_kind: "categorical" }),
  "home"],
};

// The function both runtimes execute: `os` is the SDK (the ESM build in Node, the bundle in Chromium).
export async function measure(os, configText, pin, value, n) {
  let now = Date.UTC(2030, 0, 1);
  const fetchFn = async () => new Response(configText, { status: 200 });
  const client = new os.Client({ serverUrl: "https://agg.test", serverPublicKeys: pin, maxEpsilon: 1e9,
    fetch: fetchFn, background: false, clock: () => now });
  await client.sync();
  for (let i = 0; i < 200; i++) { now += 3_600_000; client.report("places", value); } // warm-up
  const times = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    now += 3_600_000;
    const t0 = performance.now();
    const outcome = client.report("places", value);
    times[i] = performance.now() - t0;
    if (outcome.status !== "queued") throw new Error(outcome.status);
  }
  times.sort();
  const q = (p) => Math.round(times[Math.min(n - 1, Math.floor(p * n))] * 1000 * 10) / 10;
  return { median_us: q(0.5), p90_us: q(0.9), p99_us: q(0.99), max_us: q(1) };
}

async function chromium(executablePath, jobs) {
  const { chromium } = await import("playwright-core");
  const browser = await chromium.launch({ executablePath, args: ["--headless", "--no-sandbox", "--disable-gpu"] });
  try {
    const page = await browser.newPage();
    const bundle = readFileSync(new URL("../dist/onesided.min.js", import.meta.url), "utf8");
    const measureText = measure.toString();
    await page.route("https://bench.test/**", (route) => {
      const path = new URL(route.request().url()).pathname;
      // Cross-origin isolated (COOP + COEP), so performance.now() has its fine resolution (5 us, not 100 us).
      const headers = { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" };
      if (path === "/sdk.js") return route.fulfill({ body: bundle, contentType: "text/javascript", headers });
      return route.fulfill({ body: "<!doctype html><title>bench</title>", contentType: "text/html", headers });
    });
    await page.goto("https://bench.test/");
    const out = {};
    for (const [name, job] of Object.entries(jobs)) {
      out[name] = await page.evaluate(async ({ job, measureText, n }) => {
        const os = await import("/sdk.js");
        const measure = new Function(`return (${measureText})`)();
        return measure(os, job.configText, job.pin, job.value, n);
      }, { job, measureText, n: reports });
    }
    out.userAgent = await page.evaluate(() => navigator.userAgent);
    out.crossOriginIsolated = await page.evaluate(() => crossOriginIsolated);
    return out;
  } finally {
    await browser.close();
  }
}

const jobs = {};
const node = {};
for (const [name, [m, value]] of Object.entries(CASES)) {
  const server = new FakeServer({ metrics: [m] });
  jobs[name] = { configText: server.configText(), pin: server.publicKey, value };
  node[name] = await measure(os, jobs[name].configText, jobs[name].pin, value, reports);
}
const code = readFileSync(new URL("../dist/onesided.min.js", import.meta.url));
console.log(JSON.stringify({
  reports, node: { version: process.version, ...node },
  chromium: chromiumPath ? await chromium(chromiumPath, jobs) : null,
  bundle: { minified_bytes: code.length, gzip_bytes: gzipSync(code, { level: 9 }).length },
}, null, 1));
