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
  process.stdout.write(JSON.stringify({ ...outcome, pageErrors }));
} finally {
  await browser.close();
}
