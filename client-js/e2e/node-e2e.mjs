// Node end-to-end: real clients (file storage) against a real `onesided serve`.
// Usage: node e2e/node-e2e.mjs URL SIGN_PUBLIC ADMIN_TOKEN CLIENTS STATE_DIR METRIC ROUND_JSON; prints JSON.
import { join } from "node:path";
import * as os from "../dist/index.js";
import { FileStorage } from "../dist/node.js";
import { scenario } from "./scenario.mjs";

const [url, pin, token, clients, dir, metric, round] = process.argv.slice(2);
let offline = false;
const fetchFn = (u, init) => (offline ? Promise.reject(new TypeError("network is down")) : fetch(u, init));
const outcome = await scenario({
  os, url, pin, token, clients: Number(clients), fetchFn, metric, round: JSON.parse(round),
  makeStorage: async (i) => new FileStorage(join(dir, `client-${i}`, "state.bin")),
  setOffline: async (down) => { offline = down; },
});
process.stdout.write(JSON.stringify(outcome));
