"""The demo's printed table and its HTML summary with a plot."""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aggregator.demo.config import DemoResult


def _rows(estimates: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows = estimates.get("rows") or []
    return {str(r["candidate"]): r for r in rows}


def _rmse(rows: dict[str, dict[str, Any]], truth: dict[str, int]) -> float:
    errors = [(float(r["estimate"]) - truth[name]) ** 2 for name, r in rows.items() if r.get("estimate") is not None]
    return math.sqrt(sum(errors) / len(errors)) if errors else math.nan


def certificate_stats(result: DemoResult) -> dict[str, int]:
    """Safe places, how many of them are truly at or below the threshold, and how many are not."""
    threshold = result.config.threshold
    rows = result.certificates.get("rows") or []
    safe = [r for r in rows if r.get("safe")]
    # the round's data come from the clients that took part: that is the population certified
    wrong = sum(1 for r in safe if result.round_truth[str(r["candidate"])] > threshold)
    truly_safe = sum(1 for n in result.round_truth.values() if n <= threshold)
    return {"certified": len(safe), "wrong": wrong, "truly_safe": truly_safe, "candidates": len(rows)}


def print_table(result: DemoResult, say: Callable[[str], None]) -> None:
    cfg = result.config
    round_id = int(result.round["id"])
    before, after = _rows(result.estimates[0]), _rows(result.estimates[round_id])
    top = sorted(result.truth, key=lambda p: -result.truth[p])[:10]
    head_from, head_to = f"level {cfg.level_from:g}", f"level {cfg.level_to:g}"
    say("")
    say(f"{'place':<12}{'truth':>8}{head_from:>16}{'truth*':>9}{head_to:>16}")
    for name in top:
        say(f"{name:<12}{result.truth[name]:>8}{_fmt(before.get(name, {})):>16}"
            f"{result.round_truth[name]:>9}{_fmt(after.get(name, {})):>16}")
    say(f"{'RMSE, all':<12}{'':>8}{_rmse(before, result.truth):>16.1f}{'':>9}"
        f"{_rmse(after, result.round_truth):>16.1f}")
    say("truth*: visitors among the clients that took part in the round (the others refused it)")
    stats = certificate_stats(result)
    part = result.round
    say("")
    say(f"round {round_id}: {part['reports']:,} reports; {result.reports.get('refused', 0):,} clients refused "
        "(their ceiling is below the round's cost)")
    say(f"certified safe (<= {cfg.threshold} visitors, alpha = {cfg.alpha:g} per place): {stats['certified']:,} "
        f"of {stats['candidates']:,} places ({stats['truly_safe']:,} truly are); wrong: {stats['wrong']}")
    p = result.privacy
    say(f"privacy per client (everything it sent in the window: its set of places, each place hidden): "
        f"level {cfg.level_from:g} costs eps = {p['strict']:g}; with the round's re-send of the same window the "
        f"chain costs eps = {p['sequence']:g} (not the sum {p['naive_sum']:g}); each further window adds its own")
    say(f"protected: {p['guarantee']}; revealed: {p['reveals']}")
    t = result.timings
    say(f"time: collect {t.get('collect', 0):.1f} s, round {t.get('round', 0):.1f} s, "
        f"decode {t.get('decode', 0):.1f} s, total {t.get('total', 0):.1f} s wall, "
        f"{t.get('cpu', 0):.1f} CPU-s (this process, all its threads)")


def _fmt(row: dict[str, Any]) -> str:
    if not row or row.get("estimate") is None:
        return "-"
    return f"{float(row['estimate']):.0f} +- {float(row.get('std_error') or 0):.0f}"


def _plot(result: DemoResult) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    round_id = int(result.round["id"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    names = sorted(result.truth, key=lambda p: -result.truth[p])
    ranks = range(1, len(names) + 1)
    for rnd, label, color, truth in (
        (0, f"level {result.config.level_from:g}", "tab:orange", result.truth),
        (round_id, f"after the round (level {result.config.level_to:g})", "tab:blue", result.round_truth),
    ):
        rows = _rows(result.estimates[rnd])
        est = [float(rows[n]["estimate"]) if n in rows and rows[n].get("estimate") is not None else math.nan
               for n in names]
        axes[0].plot(ranks, est, ".", ms=2, alpha=0.5, color=color, label=label)
        err = [abs(e - truth[n]) for e, n in zip(est, names, strict=True)]
        axes[1].plot(ranks, err, ".", ms=2, alpha=0.5, color=color, label=label)
    axes[0].plot(ranks, [result.truth[n] for n in names], "k-", lw=1, label="truth")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("place rank (by true visitors)")
    axes[0].set_ylabel("visitors")
    axes[0].set_title("estimates vs truth")
    axes[0].legend()
    axes[1].set_xscale("log")
    axes[1].set_xlabel("place rank")
    axes[1].set_ylabel("|estimate - truth| (truth of the clients counted)")
    axes[1].set_title("absolute error")
    axes[1].legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def write_summary(result: DemoResult) -> Path:
    out = Path(result.config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = _plot(result)
    (out / "estimates.png").write_bytes(png)
    lines: list[str] = []
    print_table(result, lines.append)
    image = base64.b64encode(png).decode("ascii")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>onesided demo</title>
<style>body{{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;}}
pre{{background:#f5f5f5;padding:1rem;white-space:pre-wrap}}</style></head>
<body><h1>onesided demo: places visited, relaxed once</h1>
<p>{result.config.clients:,} clients, {result.config.places:,} places; asymmetric randomized response,
level {result.config.level_from:g} then a coordinated round to level {result.config.level_to:g}.</p>
<img alt="estimates against truth, before and after the round" src="data:image/png;base64,{image}" width="100%">
<pre>{html.escape(chr(10).join(lines))}</pre>
</body></html>
"""
    path = out / "summary.html"
    path.write_text(page, encoding="utf-8")
    return path
