"""Releases to several analysts at different levels, and what colluding analysts can learn.

1. An aggregator starts on SQLite in a temporary folder (in this process)
   with a trusted metric ``visits`` (direct encoding over places): clients
   seal their exact sets to the aggregator; analysts only ever see noisy
   central releases, charged to their budgets.
2. Real ``client_sdk.Client`` instances report the places they visited.
3. The admin makes *correlated* releases for three analysts at three levels
   (one draw of the noise at the lowest level, relaxed up the chain:
   gradual-release paper, Sec. 4.2) through ``POST /v1/releases`` with an
   ``analysts`` map. Each analyst reads only its own release.
4. A coalition averaging its answers does no better than its most trusted
   member: the coalition's epsilon is the largest level, not the sum.
5. The averaging attack of the multi-user paper, simulated
   (``aggregator.research.collusion.collusion_experiment``): independent Laplace
   answers, Mechanism A (secret non-zero locations) and correlated answers.

Run: ``.venv/bin/python examples/multi_analyst_releases.py [--clients 100]``
"""

from __future__ import annotations

import argparse
import hashlib
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from aggregator.api_client import ApiClient, ApiRequestError
from aggregator.demo.local import local_aggregator
from aggregator.research.collusion import colluders_needed, collusion_experiment
from aggregator.research.populations import SyntheticCity
from client_sdk import Client
from protocol import DirectEncoding, MetricParams, SeededRandom
from protocol.multianalyst import coalition_epsilon
from protocol.wire import window_start

ANALYSTS = {"alice": 0.25, "bob": 0.5, "carol": 1.0}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=100, help="real SDK clients (default 100)")
    parser.add_argument("--places", type=int, default=20, help="places (default 20)")
    parser.add_argument("--mechanism", choices=("ageo", "alap", "laplace"), default="ageo",
                        help="central mechanism of the correlated releases (default ageo)")
    parser.add_argument("--threshold", type=int, default=10, help="safe means answer <= threshold (default 10)")
    parser.add_argument("--trials", type=int, default=4_000, help="trials of the averaging attack (default 4000)")
    parser.add_argument("--seed", type=int, default=5, help="seed (default 5)")
    return parser.parse_args()


def collect(url: str, sign_public: bytes, folder: Path, visits: list[list[str]], seed: int) -> None:
    key = hashlib.sha256(b"example-state-key").digest()
    for i, places in enumerate(visits):
        # A trusted metric carries no local noise: a client sends it only with an infinite ceiling.
        with Client(url, folder / f"client-{i:04d}.state", background=False, server_public_keys=sign_public,
                    max_epsilon=math.inf, state_key=key, autosave=False, rng=seed * 1000 + i,
                    insecure_rng_for_testing=True) as client:
            client.sync()
            client.report("visits", places)
            client.flush()


def main() -> None:
    args = parse_args()
    city = SyntheticCity(num_places=args.places, zipf_exponent=1.0, mean_places=2.0)
    names = tuple(city.names())
    sets = city.draw_sets(args.clients, SeededRandom(args.seed))
    truth = np.array([(sets == j).sum() for j in range(args.places)])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, local_aggregator(Path(tmp) / "aggregator") as agg:
        # max_items: the most places one person adds (larger sets would be clipped at random on ingestion;
        # here none is, so `truth` is what is stored); releases protect a whole person, L1 sensitivity max_items.
        params = MetricParams(name="visits", encoding=DirectEncoding(domain=names), mode="trusted", level=math.inf,
                              min_batch_size=50, max_items=int((sets >= 0).sum(axis=1).max()))
        agg.admin.post("/v1/metrics", params.to_dict())
        collect(agg.url, agg.keys.sign_public_raw, Path(tmp), [[names[j] for j in row if j >= 0] for row in sets],
                args.seed)
        window = window_start(time.time(), params.time_precision)
        # Analyst tokens (on a server: `onesided token create --role analyst --name alice`).
        tokens = {name: agg.storage.create_token(role="analyst", name=name)[1] for name in ANALYSTS}
        made = agg.admin.post("/v1/releases", {"metric": "visits", "window": window, "mechanism": args.mechanism,
                                               "analysts": ANALYSTS, "threshold": args.threshold})["releases"]
        ids = {r["analyst"]: r["id"] for r in made}
        views = {name: ApiClient(agg.url, tokens[name]).get(f"/v1/releases/{ids[name]}") for name in ANALYSTS}
        try:
            ApiClient(agg.url, tokens["alice"]).get(f"/v1/releases/{ids['carol']}")
            peek = "alice read carol's release!"
        except ApiRequestError as exc:
            peek = f"alice asking for carol's release: HTTP {exc.status} ({exc.code})"
    show_releases(args, truth, views)
    print(peek)
    show_collusion(args)
    print(f"done in {time.perf_counter() - t0:.1f} s")


def show_releases(args: argparse.Namespace, truth: np.ndarray, views: dict[str, dict[str, Any]]) -> None:
    answers = {name: np.array([a["answer"] for a in v["answers"]], dtype=float) for name, v in views.items()}
    print(f"correlated {args.mechanism} releases of {len(truth)} places' visitor counts ({int(truth.sum())} visits), "
          f"one group: {views['alice']['group']}")
    print(f"{'analyst':8s} {'epsilon':>7s} {'mean |error|':>12s} {'safe (<= ' + str(args.threshold) + ')':>12s} {'wrong':>5s}")
    for name, level in ANALYSTS.items():
        safe = answers[name] <= args.threshold
        wrong = int((safe & (truth > args.threshold)).sum())
        print(f"{name:8s} {level:7g} {np.mean(np.abs(answers[name] - truth)):12.2f} {int(safe.sum()):12d} {wrong:5d}")
    average = np.mean(list(answers.values()), axis=0)
    top = max(ANALYSTS, key=lambda n: ANALYSTS[n])
    print(f"coalition of all three, averaging: mean |error| {np.mean(np.abs(average - truth)):.2f} "
          f"(its most trusted member alone: {np.mean(np.abs(answers[top] - truth)):.2f}); coalition epsilon "
          f"{coalition_epsilon(list(ANALYSTS.values()), correlated=True):g} correlated, "
          f"{coalition_epsilon(list(ANALYSTS.values()), correlated=False):g} if independent")


def show_collusion(args: argparse.Namespace) -> None:
    eps, margin = 0.5, 1.0
    need = colluders_needed(margin, eps)
    sizes = [1, 4, 16, need, 256]
    print(f"\naveraging attack on one count query, eps = {eps:g} per analyst, margin m = {margin:g}, "
          f"{args.trials:,} trials; the paper's i = max(30, 18 D^2/(m^2 eps^2)) = {need}")
    print(f"{'scheme':24s} " + " ".join(f"{'i=' + str(i):>15s}" for i in sizes))
    runs = {
        "independent": {},
        "mechanism_a": {"location": (1.5, 2.5)},
        "mechanism_a_calibrated": {"location": (1.5, 2.5)},
        "correlated": {"levels": list(np.linspace(eps, 2 * eps, sizes[-1]))},
    }
    for scheme, extra in runs.items():
        res = collusion_experiment(scheme, sizes, epsilon=eps, margin=margin, trials=args.trials,  # type: ignore[arg-type]
                                   rng=args.seed, **extra)
        cells = " ".join(f"{r:6.2f} P<m {w:4.2f}" for r, w in zip(res.rmse, res.within_margin, strict=True))
        print(f"{scheme:24s} {cells}")
    print("(RMSE and P(|estimate - r| < m) of the coalition's average; Mechanism A's averages converge to "
          "r + mean(mu), which an attacker who knows the interval subtracts)")


if __name__ == "__main__":
    main()
