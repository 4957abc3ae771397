"""Scenario ``city``: the demo's synthetic city, a relaxation round, decoding and certificates.

The workload of ``onesided demo`` without the server: ``clients`` people
report the set of places they visited today (direct encoding, asymmetric
noise at ``level_from``); a round relaxes the same window's memoized noise
to ``level_to`` and every client whose ceiling allows it (all but
``refusing_share``) re-sends; the aggregator estimates every place's count
(:func:`bit_estimates`) from both collections and certifies places safe
(``count <= threshold``) from the round's reports (:func:`one_sided_upper_bounds`).

Two methods, the same figures:

* ``per-client``: every client's set and permanent bits (relaxed bit by bit
  for the round, ``Randomizer.relax_permanent``), in blocks of ``block`` clients, each block seeded by its own child of
  ``SeedSequence.spawn`` (:mod:`aggregator.research.engine`: local or Dask,
  identical results). ``noise="keyed"`` derives each client's noise from
  its own secret exactly as the SDK does (:func:`client_sdk.memo.permanent_bits`).
* ``aggregate``: the holders of every place (exact joint law) and the
  (round 0, round) report pair of every place (exact multinomial over the
  chain's patterns), :mod:`aggregator.research.aggregate`.

See :mod:`aggregator.research.scenarios` for what every scenario returns.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from aggregator.analysis.certify import one_sided_upper_bounds
from aggregator.analysis.decoding import BitCounts, bit_estimates
from aggregator.research.aggregate import count_generator, place_holders, released_ones
from aggregator.research.engine import BlockCounts, Engine, LocalEngine, block_seeds, root_seed
from aggregator.research.populations import SyntheticCity, make_population, theoretical_variance
from aggregator.research.scenarios.common import (
    Figures,
    IntArray,
    Progress,
    check_method,
    check_positive_int,
    quiet,
)
from aggregator.research.scenarios.plotting import pyplot, save_figure
from aggregator.research.scenarios.registry import ScenarioParts, register
from protocol.accounting import sequence_bit_epsilon
from protocol.encodings import DirectEncoding, canonical_value
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.rng import RandomSource, SeededRandom
from protocol.validation import check_int

NOISES: tuple[str, ...] = ("seeded", "keyed")


@dataclass(frozen=True, kw_only=True)
class CitySetup:
    """The demo's city and round (defaults: ``onesided demo``'s).

    Attributes:
        clients: people in the city.
        block: clients per block of the per-client path (one seed each; a
            block's arrays are ``block x places`` floats).
        places, zipf_exponent, mean_places: the :class:`SyntheticCity`.
        level_from, level_to: the collection's and the round's levels (asymmetric).
        refusing_share: clients whose ceiling refuses the round.
        threshold: a place is safe when at most this many round participants hold it.
        alpha: error level of the ``alpha > 0`` certificate.
        noise: ``"seeded"`` (the block's stream) or ``"keyed"`` (per-client secret, as the SDK).
    """

    clients: int
    block: int
    places: int = 2_000
    zipf_exponent: float = 1.1
    mean_places: float = 3.0
    level_from: float = 1.0
    level_to: float = 8.0
    refusing_share: float = 0.05
    threshold: int
    alpha: float = 0.01
    noise: str = "seeded"

    def __post_init__(self) -> None:
        for name in ("clients", "block", "places"):
            check_positive_int(name, getattr(self, name))
        if not 0 < self.level_from < self.level_to < math.inf:
            raise ParameterError("level_to", f"need 0 < level_from < level_to, got {self.level_from}, {self.level_to}")
        if not 0.0 <= self.refusing_share < 1.0:
            raise ParameterError("refusing_share", f"must be in [0, 1), got {self.refusing_share}")
        check_int("threshold", self.threshold, low=0)
        if not 0.0 < self.alpha < 1.0:
            raise ParameterError("alpha", f"must be in (0, 1), got {self.alpha}")
        if self.noise not in NOISES:
            raise ParameterError("noise", f"must be one of {NOISES}, got {self.noise!r}")

    def city(self) -> SyntheticCity:
        return SyntheticCity(num_places=self.places, zipf_exponent=self.zipf_exponent, mean_places=self.mean_places)

    def params(self) -> MetricParams:
        return MetricParams(name="places_visited", encoding=DirectEncoding(domain=tuple(self.city().names())),
                            mode="asymmetric", level=self.level_from, value_kind="set")

    def blocks(self) -> int:
        return -(-self.clients // self.block)


CITY_SETUPS = {
    # onesided demo's defaults: 20,000 people, threshold 50 (0.25% of them).
    "small": CitySetup(clients=20_000, block=2_000, threshold=50),
    "paper": CitySetup(clients=1_000_000, block=2_000, threshold=2_500),
}


def with_clients(setup: CitySetup, clients: int, method: str) -> CitySetup:
    """``setup`` at ``clients``, the threshold scaled with it (the same share of the city)."""
    check_positive_int("clients", clients)
    return replace(setup, clients=clients, block=min(setup.block, clients),
                   threshold=max(1, round(setup.threshold * clients / setup.clients)))


# --------------------------------------------------------------------------
# per-client: one block
# --------------------------------------------------------------------------


def _client_secret(root: bytes, index: int) -> bytes:
    return hmac.new(root, index.to_bytes(8, "big"), hashlib.sha256).digest()


def city_block(setup: CitySetup, index: int, seed: np.random.SeedSequence) -> BlockCounts:
    """Clients ``index * block ..`` of the city: truths and both collections' ones per place.

    Everything is drawn from ``SeededRandom(seed)``: the permanent bits by
    ``sample_permanent`` and the round's by ``relax_permanent`` (the noise
    chain's joint law, without the noise). With ``noise="keyed"`` the
    memoized noise comes from each client's secret
    ``HMAC-SHA256(root, uint64_be(client index))`` instead, through the SDK's
    :func:`~client_sdk.memo.permanent_bits` (window 0).
    """
    n = min(setup.block, setup.clients - index * setup.block)
    rng = SeededRandom(seed)
    params = setup.params()
    pop = make_population(setup.city(), n, params.encoding, rng)
    willing = rng.uniform(n) >= setup.refusing_share
    base = params.randomizer(setup.level_from)
    if setup.noise == "keyed":
        first, second = _keyed_permanent(setup, params, pop.bits, pop.item_sets, willing, index, seed)
    else:  # the permanent bits drawn and relaxed without their noise (exact at the stated probabilities)
        first = base.sample_permanent(pop.bits, rng)
        second = base.relax_permanent(pop.bits[willing], first[willing], setup.level_to, rng)
    held = pop.item_sets[pop.item_sets >= 0]
    held_willing = pop.item_sets[willing][pop.item_sets[willing] >= 0]
    return {
        "clients": np.array([n]), "willing": np.array([int(willing.sum())]),
        "truth": np.bincount(held, minlength=setup.places).astype(np.int64),
        "round_truth": np.bincount(held_willing, minlength=setup.places).astype(np.int64),
        "ones_first": first.sum(axis=0).astype(np.int64), "ones_round": second.sum(axis=0).astype(np.int64),
    }


def _keyed_permanent(setup: CitySetup, params: MetricParams, bits: Any, sets: IntArray, willing: Any,
                     index: int, seed: np.random.SeedSequence) -> tuple[Any, Any]:
    """Each client's permanent bits from its own secret (the SDK's memoized noise), one client at a time."""
    from client_sdk.memo import noise_key, permanent_bits

    root = hashlib.sha256(b"onesided-city/" + str(seed.entropy).encode()).digest()
    names = params.encoding.domain  # type: ignore[union-attr]
    first = np.empty_like(bits)
    second = np.empty((int(willing.sum()), bits.shape[1]), dtype=bool)
    w = 0
    for i in range(bits.shape[0]):
        secret = _client_secret(root, index * setup.block + i)
        key = noise_key(0, canonical_value([names[j] for j in sets[i] if j >= 0]))
        first[i] = permanent_bits(secret, params, bits[i], key, [setup.level_from])
        if willing[i]:
            second[w] = permanent_bits(secret, params, bits[i], key, [setup.level_from, setup.level_to])
            w += 1
    return first, second


def _per_client(setup: CitySetup, rng: RandomSource, engine: Engine, progress: Progress) -> BlockCounts:
    return engine.run(city_block, setup, block_seeds(root_seed(rng), setup.blocks()), progress)


# --------------------------------------------------------------------------
# aggregate: the same counts, drawn per place
# --------------------------------------------------------------------------


def _aggregate(setup: CitySetup, rng: RandomSource) -> BlockCounts:
    """Refusers ``Binomial(clients, refusing_share)`` (independent of the sets), each group's holders
    exactly, the participants' (round 0, round) ones from the chain, the refusers' round 0 ones."""
    gen = count_generator(rng)
    city, base = setup.city(), setup.params().randomizer(setup.level_from)
    refusing = int(gen.binomial(setup.clients, setup.refusing_share))
    willing = setup.clients - refusing
    held_w, held_r = place_holders(city, willing, gen), place_holders(city, refusing, gen)
    first_w, ones_round = released_ones(held_w, willing, base, (setup.level_from, setup.level_to), gen)
    first_r = released_ones(held_r, refusing, base, (setup.level_from,), gen)[0]
    return {"clients": np.array([setup.clients]), "willing": np.array([willing]), "truth": held_w + held_r,
            "round_truth": held_w, "ones_first": first_w + first_r, "ones_round": ones_round}


# --------------------------------------------------------------------------
# decoding and certificates (both methods)
# --------------------------------------------------------------------------


def _decode(setup: CitySetup, counts: BlockCounts, level: float, ones: str, truth: str, reports: int) -> Figures:
    """Estimates of every place from one collection, against the truth and the closed form."""
    params = setup.params()
    r = params.randomizer(level)
    est, _ = bit_estimates(BitCounts(ones=counts[ones][None, :], totals=np.array([reports])), r)
    t = counts[truth].astype(np.float64)
    theory = theoretical_variance(t, np.full_like(t, float(reports)), r)
    mse = float(np.mean((est[0] - t) ** 2))
    return {"level": level, "reports": reports, "mse": mse, "theory": float(np.mean(theory)),
            "ratio": mse / float(np.mean(theory)), "estimates": est[0]}


def _certify(setup: CitySetup, counts: BlockCounts, willing: int) -> Figures:
    """Round certificates at ``threshold``: ``alpha = 0`` (never wrong) and ``alpha``."""
    params = setup.params()
    bc = BitCounts(ones=counts["ones_round"][None, :], totals=np.array([willing]))
    truly = counts["round_truth"] <= setup.threshold
    out: Figures = {"threshold": setup.threshold, "truly_safe": int(truly.sum())}
    for name, alpha in (("alpha0", 0.0), ("alpha", setup.alpha)):
        bounds = one_sided_upper_bounds(bc, params, setup.level_to, list(params.encoding.domain),  # type: ignore[union-attr]
                                        alpha=alpha)
        safe = bounds <= setup.threshold
        out[name] = {"alpha": alpha, "certified_safe": int(safe.sum()), "false_safe": int((safe & ~truly).sum()),
                     "share_of_safe": float((safe & truly).sum() / truly.sum()) if truly.any() else None}
    return out


def city(setup: CitySetup, rng: RandomSource, progress: Progress = quiet, *, method: str = "per-client",
         engine: Engine | None = None) -> Figures:
    """Decoding error of both collections against theory, and the round's certificates.

    ``mse / theory`` is 1 up to sampling error (the round's estimates from
    relaxed noise are as accurate as a one-shot collection at ``level_to``);
    the ``alpha = 0`` certificates are never wrong.
    """
    check_method(method)
    progress(f"city: {setup.clients:,} clients, {setup.places:,} places ({method})")
    counts = _aggregate(setup, rng) if method == "aggregate" else _per_client(setup, rng, engine or LocalEngine(),
                                                                              progress)
    clients, willing = int(counts["clients"][0]), int(counts["willing"][0])
    first = _decode(setup, counts, setup.level_from, "ones_first", "truth", clients)
    second = _decode(setup, counts, setup.level_to, "ones_round", "round_truth", willing)
    top = np.argsort(-counts["truth"], kind="stable")[:10]
    return {
        "clients": clients, "method": method, "engine": None if method == "aggregate" else (engine or LocalEngine()).name,
        "noise": setup.noise, "places": setup.places, "willing": willing, "visits": int(counts["truth"].sum()),
        "level_from": setup.level_from, "level_to": setup.level_to,
        "epsilon_window": sequence_bit_epsilon("asymmetric", (setup.level_from, setup.level_to))[0],
        "round0": {k: v for k, v in first.items() if k != "estimates"},
        "round": {k: v for k, v in second.items() if k != "estimates"},
        "certificates": _certify(setup, counts, willing),
        "top_places": [{"place": int(i), "truth": int(counts["truth"][i]), "round_truth": int(counts["round_truth"][i]),
                        "estimate_round0": float(first["estimates"][i]), "estimate_round": float(second["estimates"][i])}
                       for i in top],
        "truth": counts["truth"].tolist(), "round_truth": counts["round_truth"].tolist(),
        "ones_round0": counts["ones_first"].tolist(), "ones_round": counts["ones_round"].tolist(),
    }


# --------------------------------------------------------------------------
# what ``onesided simulate`` prints and draws, and the scenario's entry
# --------------------------------------------------------------------------


def _city_lines(f: Figures) -> list[str]:
    c = f["certificates"]
    out = [f"synthetic city: {f['clients']:,} clients ({f['method']}), {f['places']:,} places, {f['visits']:,} visits; "
           f"round {f['level_from']:g} -> {f['level_to']:g} with {f['willing']:,} clients "
           f"(window epsilon {f['epsilon_window']:g})",
           "collection  level  reports         MSE of place counts   closed form      ratio"]
    for name in ("round0", "round"):
        r = f[name]
        out.append(f"{name:10s}  {r['level']:<5g}  {r['reports']:<14,d}  {r['mse']:<20.4g}  {r['theory']:<15.4g}  "
                   f"{r['ratio']:.3f}")
    for key in ("alpha0", "alpha"):
        a = c[key]
        share = "-" if a["share_of_safe"] is None else f"{a['share_of_safe']:.3f}"
        out.append(f"certified safe (<= {c['threshold']:,}) at alpha = {a['alpha']:g}: {a['certified_safe']:,} of "
                   f"{c['truly_safe']:,} truly safe ({share}), wrongly: {a['false_safe']}")
    return out


def _plot_city(f: Figures, path: Path, title: str) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    for i, (name, truth, label) in enumerate((("round0", "truth", "round 0"), ("round", "round_truth", "round"))):
        r = f[name]
        t = np.asarray(f[truth], dtype=float)
        ones = np.asarray(f["ones_round0" if name == "round0" else "ones_round"], dtype=float)
        q = np.exp(-r["level"] / 2.0)
        estimate = (ones - q * r["reports"]) / (1.0 - q)
        left.scatter(t, estimate - t, s=4, color=f"C{i}", alpha=0.5,
                     label=f"{label}, level {r['level']:g} (sd {r['mse'] ** 0.5:.3g}, theory {r['theory'] ** 0.5:.3g})")
    left.set_xscale("symlog")
    left.set_xlabel("true count of the place")
    left.set_ylabel("estimate - truth")
    left.legend(fontsize=8)
    c = f["certificates"]
    names = ["truly safe", "certified, alpha = 0", f"certified, alpha = {c['alpha']['alpha']:g}",
             "wrongly certified (alpha > 0)"]
    values = [c["truly_safe"], c["alpha0"]["certified_safe"], c["alpha"]["certified_safe"], c["alpha"]["false_safe"]]
    right.bar(range(4), values, color=["grey", "C0", "C1", "C3"])
    right.set_xticks(range(4), names, rotation=15, fontsize=8)
    right.set_ylabel(f"places (threshold {c['threshold']:,} round participants)")
    save_figure(fig, path, title)


register(ScenarioParts(name="city", setups=CITY_SETUPS, run=city, resize=with_clients, summary=_city_lines,
                       plot=_plot_city, keyed_noise=True))
