// The end-to-end scenario shared by the Node run and the Chromium page: clients report while
// offline, come online and send, then follow a relaxation round the operator opens; returns the
// true counts for the test to compare with the aggregator's estimates.
export const DOMAIN = ["park", "gym", "cafe", "museum", "pool"];

export function valuesOf(i) {
  const out = ["pool"];
  if (i % 2 === 0) out.push("park");
  if (i % 3 === 0) out.push("gym");
  if (i % 5 === 0) out.push("cafe");
  return out;
}

export async function scenario({ os, url, pin, token, clients, makeStorage, setOffline, fetchFn, metric = "places",
  round = { level_to: 4.0 } }) {
  const events = [];
  const made = [];
  // One window holds the whole run (a round re-sends the current window's value only): start after
  // the hour turns when it is about to.
  const toNextHour = 3_600_000 - (Date.now() % 3_600_000);
  if (toNextHour < 120_000) await new Promise((r) => setTimeout(r, toNextHour + 1000));
  await setOffline(true);
  for (let i = 0; i < clients; i++) {
    made.push(new os.Client({
      serverUrl: url, serverPublicKeys: pin, maxEpsilon: 20, storage: await makeStorage(i), background: false,
      fetch: fetchFn, onEvent: (e) => events.push(e),
    }));
  }
  const window = Math.floor(Date.now() / 1000 / 3600) * 3600;
  const offline = made.map((c, i) => c.report(metric, valuesOf(i)).status);
  await Promise.all(made.map((c) => c.flush({ deadline: 5 })));
  await setOffline(false);
  const online = events.length; // what follows happens with the network up
  const first = await Promise.all(made.map((c) => c.flush({ deadline: 60 })));
  const opened = await (fetchFn ?? fetch)(`${url}/v1/metrics/${metric}/rounds`, {
    method: "POST", headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify(round),
  });
  const opening = await opened.json();
  const joined = [];
  for (const c of made) {
    await c.sync();
    joined.push((await c.flush({ deadline: 60 })).sent);
  }
  const ledger = made[0].ledger();
  await Promise.all(made.map((c) => c.close()));
  const truth = Object.fromEntries(DOMAIN.map((d) => [d, 0]));
  for (let i = 0; i < clients; i++) for (const v of valuesOf(i)) truth[v]++;
  return { window, round_id: opening.id, offline, first: first.map((f) => f.sent), joined, truth, ledger,
    offlineErrors: events.slice(0, online).filter((e) => e.type === "transport_error").length,
    errors: events.slice(online).filter((e) => ["transport_error", "storage_error", "rejected", "round_refused", "dropped"].includes(e.type)) };
}
