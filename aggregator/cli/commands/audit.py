"""``onesided audit``: empirical lower bounds on the privacy loss of the shipped mechanisms.

Each target (``aggregator.research.audit.TARGETS``, and the device path end to
end: ``aggregator.research.audit_device.DEVICE_TARGETS``) is sampled on two
neighbouring inputs and the table shows the printed epsilon next to the
audited lower bound; a lower bound above the claim is a failure (exit 1).
``--planted`` audits the deliberately broken mechanisms and the planted
device-path regressions instead, which must be caught (a planted target that
is not caught also exits 1). docs/audit.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from aggregator.cli.options import Subparsers, print_json


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "audit", help="empirical privacy audit: lower bounds on the true epsilon of the shipped mechanisms"
    )
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="targets to audit (default: every shipped one)")
    parser.add_argument("--samples", type=int, default=10**6, help="outcomes per input (default 1000000)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the sample streams (default 1)")
    parser.add_argument("--confidence", type=float, default=None,
                        help="confidence of each lower bound (default 1 - 1e-6)")
    parser.add_argument("--planted", action="store_true",
                        help="audit the planted broken mechanisms and device-path regressions (must be caught)")
    parser.add_argument("--device-samples", type=int, default=None,
                        help="clients per input for the device-path targets (default 4000: each sample is a whole "
                        "client run, sealed and opened, ~10-25 ms)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes for the device-path targets (default: the CPUs this process may "
                        "use); the IRR draws of a run are the same for every N")
    parser.add_argument("--json", action="store_true", help="JSON output")
    parser.add_argument("--list", action="store_true", help="list the targets and their claims, audit nothing")
    parser.set_defaults(func=run_audit)


def _selected(args: argparse.Namespace) -> list[tuple[str, bool]]:
    """``(name, planted)`` in the order given; the default set depends on ``--planted``."""
    from aggregator.research.audit import find_target, planted_targets, shipped_targets

    planted = [n for registry in planted_targets().values() for n in registry]
    names = list(args.targets)
    if not names:
        names = planted if args.planted else [n for registry in shipped_targets().values() for n in registry]
    elif args.planted:
        names += [n for n in planted if n not in names]
    for name in names:
        find_target(name)  # unknown names fail before any sampling
    return [(name, name in planted) for name in names]


def _jobs(jobs: int | None) -> int:
    """``--jobs``, checked; by default the CPUs this process may run on."""
    import os

    from protocol.validation import check_int

    if jobs is not None:
        return check_int("jobs", jobs, low=1)
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _target(name: str, device_samples: int | None, jobs: int) -> Any:
    """The target, its sample cap set by ``--device-samples`` when it has one (the device-path targets),
    its device samplers spread over ``jobs`` processes."""
    import dataclasses

    from aggregator.research.audit import find_target
    from aggregator.research.audit_device import with_jobs
    from protocol.validation import check_int

    target = find_target(name)
    if device_samples is not None and target.max_samples is not None:
        target = dataclasses.replace(target, max_samples=check_int("device_samples", device_samples, low=4))
    return with_jobs(target, jobs)


def _verdict(passed: bool, planted: bool) -> str:
    if planted:
        return "MISSED" if passed else "caught"
    return "ok" if passed else "FAIL"


def _list(selected: list[tuple[str, bool]], as_json: bool) -> int:
    from aggregator.research.audit import find_target

    rows: list[dict[str, Any]] = []
    for name, planted in selected:
        target = find_target(name)
        rows.append({"name": name, "planted": planted, "claimed": target.claimed,
                     "direction": target.direction, "description": target.description})
    if as_json:
        print_json(rows)
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  {r['claimed']:>9.6f}  {r['direction']:<8}  {r['description']}")
    return 0


def _table(rows: list[dict[str, Any]], samples: int, confidence: float) -> None:
    header = ("target", "samples", "claimed", "audited lower bound", "event", "law p", "verdict")
    cells = [(r["name"], str(r["samples"]), f"{r['claimed']:.6f}", f"{r['lower_bound']:.6f}",
              f"[{r['ratio']}] {r['event']}", "-" if r["law_p"] is None else f"{r['law_p']:.3g}", r["verdict"])
             for r in rows]
    print(f"up to {samples} samples per input (a target may cap them), confidence {confidence:g} per lower bound "
          f"and per law check (device targets: each window's reports against their exact joint law)")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---", "---:", "---:", "---:", "---", "---:", "---"]) + "|")
    for row in cells:
        print("| " + " | ".join(row) + " |")


def run_audit(args: argparse.Namespace) -> int:
    from aggregator.research.audit import DEFAULT_CONFIDENCE, audit

    selected = _selected(args)
    if args.list:
        return _list(selected, args.json)
    confidence = DEFAULT_CONFIDENCE if args.confidence is None else args.confidence
    jobs = _jobs(args.jobs)
    rows: list[dict[str, Any]] = []
    for name, planted in selected:
        result = audit(_target(name, args.device_samples, jobs), args.samples, seed=args.seed, confidence=confidence)
        rows.append({**result.to_dict(), "planted": planted, "verdict": _verdict(result.passed, planted)})
    if args.json:
        print_json(rows)
    else:
        _table(rows, args.samples, confidence)
    failed = [r["name"] for r in rows if r["verdict"] in ("FAIL", "MISSED")]
    if failed:
        print(f"audit failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
