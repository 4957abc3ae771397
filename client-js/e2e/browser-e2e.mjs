// Chromium end-to-end: a page embeds the SDK bundle (dist/onesided.min.js), its clients keep their
// state in IndexedDB, report while the browser is offline, come online, follow a round, against a
// real `onesided serve`. Playwright drives the system's Chromium (executablePath), never a download.
// Usage: node e2e/browser-e2e.mjs URL SIGN_PUBLIC ADMIN_TOKEN CLIENTS CHROMIUM; prints JSON.
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const [url, pin, token, clients, executablePath] = process.argv.slice(2);
const files = {
  "/e2e/onesided.min.js": readFileSync(new URL("../dist/onesided.min.js", import.meta.url)),
  "/e2e/scenario.mjs": readFileSync(new URL("./scenario.mjs", import.meta.url)),
  "/e2e/page.html": Buffer.from("<!doctype html><meta charset=utf-8><title>app</title><p>an app"),
};
const browser = await chromium.launch({ executablePath, args: ["--headless", "--no-sandbox", "--disable-gpu",
  "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
try {
  const context = await browser.newContext();
  // The page and the SDK are served on the aggregator's origin (the aggregator sends no CORS headers).
  await context.route(`${url}/e2e/**`, (route) => {
    const path = new URL(route.request().url()).pathname;
    const body = files[path];
    if (!body) return route.fulfill({ status: 404 });
    const type = path.endsWith(".html") ? "text/html" : "text/javascript";
    return route.fulfill({ status: 200, body, contentType: type });
  });
  const page = await context.newPage();
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  await page.exposeFunction("setOffline", (down) => context.setOffline(down));
  await page.goto(`${url}/e2e/page.html`);
  const outcome = await page.evaluate(async ({ url, pin, token, clients }) => {
    const os = await import("/e2e/onesided.min.js");
    const { scenario } = await import("/e2e/scenario.mjs");
    const started = performance.now();
    const result = await scenario({ os, url, pin, token, clients, setOffline: (d) => window.setOffline(d),
      makeStorage: async (i) => new os.IndexedDBStorage(`onesided-e2e-${i}`) });
    return { ...result, ms: performance.now() - started };
  }, { url, pin, token, clients: Number(clients) });
  // Page hide: a client with its background sender (next send in 10 minutes) flushes when the page is hidden.
  const hide = await page.evaluate(async ({ url, pin }) => {
    const os = await import("/e2e/onesided.min.js");
    const events = [];
    let configured;
    const ready = new Promise((resolve) => { configured = resolve; });
    const c = new os.Client({ serverUrl: url, serverPublicKeys: pin, maxEpsilon: 20, sendInterval: 600,
      storage: new os.IndexedDBStorage("onesided-hide"),
      onEvent: (e) => { events.push(e); if (e.type === "config") configured(); } });
    await ready;
    await new Promise((r) => setTimeout(r, 200)); // the first background turn ends
    const status = c.report("hidden", ["park"]).status;
    const before = c.pending();
    Object.defineProperty(document, "visibilityState", { value: "hidden", configurable: true });
    document.dispatchEvent(new Event("visibilitychange"));
    for (let i = 0; i < 100 && c.pending() > 0; i++) await new Promise((r) => setTimeout(r, 100));
    return { status, before, after: c.pending(), sent: events.filter((e) => e.type === "sent").length };
  }, { url, pin });
  process.stdout.write(JSON.stringify({ ...outcome, hide, pageErrors }));
} finally {
  await browser.close();
}
