"""``onesided demo``: the whole system on the embedded default, end to end.

1. Start an aggregator on SQLite in a fresh data folder (keys, tokens).
2. Register an asymmetric "places visited" metric over a synthetic city
   (direct encoding: one bit per place, so certificates are exact).
3. Clients report the set of places they visited at a strict level. A few
   hundred are full :class:`client_sdk.Client` instances (encrypted state
   file, pinned key, signed config, ledger); the rest are simulated clients
   that make every report with the client's own pipeline
   (:class:`client_sdk.memo.ReportPlan`: memoized noise from their own
   secret, then sealed) without a state file, so that 20,000 of them fit in
   a minute.
4. The operator opens a relaxation round to a looser level. Clients verify
   the signed announcement, check their ceiling (a few refuse: their
   ceiling is lower), relax their memoized noise with the lazy step and
   report again, tagged with the round.
5. The round is closed; both rounds are decoded over the HTTP API,
   certificates are issued, and a table and an HTML summary are written.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import requests

from aggregator.demo.config import METRIC, DemoConfig, DemoResult
from aggregator.demo.local import (
    LocalAggregator,
    SimulatedClients,
    client_secrets,
    local_aggregator,
    upload,
)
from aggregator.demo.progress import Progress
from aggregator.demo.report import print_table, write_summary
from aggregator.research.populations import SyntheticCity, make_population
from protocol.chain import window_cost
from protocol.encodings import DirectEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.rng import SecureRandom, SeededRandom
from protocol.wire import verify_config, window_start

# --------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------


def _metric_params(cfg: DemoConfig, city: SyntheticCity) -> MetricParams:
    return MetricParams(
        name=METRIC,
        encoding=DirectEncoding(domain=tuple(city.names())),
        mode="asymmetric",
        level=cfg.level_from,
        value_kind="set",
        time_precision=86400,
        min_batch_size=100,
    )


def _sdk_clients(cfg: DemoConfig, agg: LocalAggregator, data_dir: Path) -> list[Any]:
    from client_sdk import Client

    folder = data_dir / "clients"
    folder.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(b"onesided-demo-state-key").digest()
    return [
        Client(agg.url, folder / f"client-{i:05d}.state", server_public_keys=agg.keys.sign_public_raw,
               max_epsilon=cfg.ceiling, state_key=key, rng=None if cfg.seed is None else cfg.seed * 100_003 + i,
               insecure_rng_for_testing=cfg.seed is not None,
               background=False)  # the demo drives sync() and flush() itself: no thread per simulated device
        for i in range(cfg.sdk_clients)
    ]


def run_demo(cfg: DemoConfig, *, progress: bool = True, say: Callable[[str], None] = print) -> DemoResult:
    """Run the demo; returns what it measured and writes ``cfg.out_dir/summary.html``.

    The aggregator's data (database, private keys, the SDK clients' state
    files) goes in ``cfg.data_dir`` (default ``cfg.out_dir/data``), which must
    be empty or absent; it is removed at the end, even when the run fails,
    unless ``cfg.keep``. Only the summary and its plot stay.

    Raises:
        ParameterError: the data folder holds something already (field ``data_dir``).
        OSError: the output folder cannot be made.
    """
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)  # fails now, not after the run, if it cannot be made
    data_dir = Path(cfg.data_dir) if cfg.data_dir is not None else out_dir / "data"
    made_here = not data_dir.exists()
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # private: keys, reports, client states
    if any(data_dir.iterdir()):
        raise ParameterError("data_dir", f"{data_dir} is not empty (kept by an earlier run with --keep?): "
                             "remove it or choose another --out")
    say(f"the demo writes under {out_dir.resolve()}")
    try:
        result = _run(cfg, data_dir, progress, say)
    finally:
        if not cfg.keep:
            _remove_private_data(data_dir, folder_too=made_here)
    if cfg.keep:
        say(f"kept the aggregator's database, private keys and client states in {data_dir.resolve()}")
    else:
        say(f"removed the aggregator's database, private keys and client states from {data_dir.resolve()} "
            "(--keep keeps them)")
    assert result.summary_path is not None
    say(f"summary: {result.summary_path.resolve()} (open it in a browser)")
    return result


def _remove_private_data(data_dir: Path, *, folder_too: bool) -> None:
    """Delete what the demo wrote in its data folder (and the folder itself when the demo made it)."""
    if folder_too:
        shutil.rmtree(data_dir, ignore_errors=True)
        return
    for entry in data_dir.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _run(cfg: DemoConfig, data_dir: Path, progress: bool, say: Callable[[str], None]) -> DemoResult:
    bars = Progress(progress)
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    with local_aggregator(data_dir) as agg:
        result = DemoResult(config=cfg, data_dir=data_dir, server=agg.url)
        say(f"aggregator on SQLite at {data_dir} listening on {agg.url}")
        city = SyntheticCity(num_places=cfg.places, zipf_exponent=cfg.zipf_exponent, mean_places=cfg.mean_places)
        params = _metric_params(cfg, city)
        created = agg.admin.post("/v1/metrics", params.to_dict())
        digest = created["digest"]
        rng = SeededRandom(cfg.seed) if cfg.seed is not None else SecureRandom()
        population = make_population(city, cfg.clients, params.encoding, rng)
        truth = population.true_counts(cfg.places)
        result.truth = {name: int(n) for name, n in zip(population.names, truth, strict=True)}
        say(f"synthetic city: {cfg.places} places, {cfg.clients:,} clients, "
            f"{int((population.item_sets >= 0).sum()):,} visits (Zipf {cfg.zipf_exponent})")

        sdk = _sdk_clients(cfg, agg, data_dir)
        sim = SimulatedClients(
            params=params, digest=digest, population=population, first=cfg.sdk_clients,
            secrets=client_secrets(cfg.clients - cfg.sdk_clients, cfg.seed),
            ceilings=np.where(rng.uniform(cfg.clients - cfg.sdk_clients) < cfg.refusing_share,
                              cfg.level_from, cfg.ceiling),
        )
        seal_public = agg.keys.seal_public_raw
        window = window_start(time.time(), params.time_precision)
        everyone = np.arange(cfg.sdk_clients, cfg.clients)

        # --- round 0: the strict collection ------------------------------------
        t = time.perf_counter()
        strict = f"level {cfg.level_from:g}"
        with bars.step(f"{strict}: SDK clients sync, report, send", len(sdk), "client") as tick:
            _drive(sdk, population, tick)
        with bars.step(f"{strict}: simulated clients report", len(everyone), "report") as tick:
            counts = upload(agg.url, sim.reports(levels=[cfg.level_from], round_id=0, seal_public=seal_public,
                                                 window=window, who=everyone), total=len(everyone), progress=tick)
        result.timings["collect"] = time.perf_counter() - t
        result.reports["round0_simulated"] = counts.get("accepted", 0)

        # --- the round ---------------------------------------------------------
        opened = agg.admin.post(f"/v1/metrics/{METRIC}/rounds", {"level_to": cfg.level_to, "expires_in": 3600})
        round_id = int(opened["id"])
        say(f"round {round_id} opened: level {opened['level_from']:g} -> {opened['level_to']:g} (signed announcement)")
        t = time.perf_counter()
        relaxed = f"round to level {cfg.level_to:g}"
        with bars.step(f"{relaxed}: SDK clients verify, relax, report, send", len(sdk), "client") as tick:
            _drive(sdk, population, tick)  # sync verifies the announcement and relaxes if the ceiling allows
        announcement = _verified_announcement(agg, round_id)
        cost = window_cost(params, [cfg.level_from, announcement.level_to])[0]
        willing = everyone[sim.ceilings >= cost]
        with bars.step(f"{relaxed}: simulated clients re-send", len(willing), "report") as tick:
            counts = upload(agg.url, sim.reports(levels=[cfg.level_from, announcement.level_to],
                                                 round_id=round_id, seal_public=seal_public, window=window,
                                                 who=willing), total=len(willing), progress=tick)
        result.timings["round"] = time.perf_counter() - t
        result.reports["round_simulated"] = counts.get("accepted", 0)
        took_part = np.concatenate([np.arange(cfg.sdk_clients), willing])
        held = population.item_sets[took_part]
        round_counts = np.bincount(held[held >= 0], minlength=cfg.places)
        result.round_truth = {name: int(n) for name, n in zip(population.names, round_counts, strict=True)}
        result.reports["refused"] = int(len(everyone) - len(willing))
        closed = agg.admin.post(f"/v1/rounds/{round_id}/close")
        result.round = {k: closed[k] for k in ("id", "level_from", "level_to", "reports", "participation")}

        # --- decoding ----------------------------------------------------------
        t = time.perf_counter()
        for rnd in (0, round_id):
            result.estimates[rnd] = agg.analyst.get(f"/v1/metrics/{METRIC}/estimates",
                                                    {"window": window, "round": rnd})
        result.certificates = agg.analyst.get(
            f"/v1/metrics/{METRIC}/certificates",
            {"window": window, "round": round_id, "threshold": cfg.threshold, "alpha": cfg.alpha},
        )
        result.timings["decode"] = time.perf_counter() - t
        result.privacy = _privacy(cfg, params, sdk)
        for client in sdk:
            client.close()
    result.timings["total"] = time.perf_counter() - t0
    result.timings["cpu"] = time.process_time() - cpu0
    print_table(result, say)
    result.summary_path = write_summary(result)
    return result


SDK_THREADS = 4  # SDK clients in flight at once: their HTTP round trips and fsyncs overlap


def _drive(sdk: list[Any], population: Any, tick: Callable[[int], None]) -> None:
    """Each SDK client syncs (config, rounds), reports its set of places and sends it.

    The clients run a few at a time: each one's work is mostly waiting (two HTTP
    round trips to the in-process aggregator and seven fsyncs of its state and
    queue files), which threads overlap. Each client has its own state file and
    seeded generator, so the order they run in changes nothing they send.
    """

    def one(i: int) -> None:
        client = sdk[i]
        client.sync()
        client.report(METRIC, population.member_sets(i))
        client.flush()

    with ThreadPoolExecutor(SDK_THREADS, thread_name_prefix="onesided-demo-sdk") as pool:
        for _ in pool.map(one, range(len(sdk))):
            tick(1)


def _verified_announcement(agg: LocalAggregator, round_id: int) -> Any:
    """What a simulated client does with the config: verify it with the pinned key, pick the round."""
    document = requests.get(f"{agg.url}/v1/config", timeout=30).json()
    config = verify_config(document, sign_public=agg.keys.sign_public_raw)  # rounds verified with it
    for announcement in config.rounds:
        if announcement.round_id == round_id:
            if announcement.expires_at <= time.time():
                raise ParameterError("round", "the round expired")
            return announcement
    raise ParameterError("round", f"round {round_id} is not in the signed config")


def _privacy(cfg: DemoConfig, params: MetricParams, sdk: list[Any]) -> dict[str, Any]:
    strict = window_cost(params, [cfg.level_from])[0]
    relaxed_seq = window_cost(params, [cfg.level_from, cfg.level_to])[0]
    naive = strict + window_cost(params, [cfg.level_to])[0]
    info: dict[str, Any] = {
        "strict": strict, "sequence": relaxed_seq, "naive_sum": naive,
        "guarantee": params.guarantee(cfg.level_to).protects,
        "reveals": params.guarantee(cfg.level_to).reveals,
    }
    if sdk:
        entry = sdk[0].ledger()[METRIC]
        info["sdk_ledger"] = {k: v for k, v in vars(entry).items() if isinstance(v, int | float | str | list | tuple)}
    return info


def cleanup(result: DemoResult) -> None:
    """Remove the demo's data folder."""
    shutil.rmtree(result.data_dir, ignore_errors=True)
