"""Start-up costs an app or an operator pays: `import client_sdk` and `onesided --help`.

Each figure is the median of fresh interpreter runs (``-X importtime`` is not used: it slows imports):

* ``import client_sdk`` minus importing its own dependencies (numpy, requests, cryptography's
  primitives, mmh3) in the same process first (target: at most 0.15 s);
* ``onesided --help`` minus a bare ``python -c pass`` (target: at most 0.35 s).

Run: ``.venv/bin/python benchmarks/startup.py [--runs 15]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEPENDENCIES = (
    "import numpy, requests, mmh3; "
    "import cryptography.hazmat.primitives.asymmetric.x25519, cryptography.hazmat.primitives.ciphers.aead"
)
SDK_EXTRA = (
    "import time; t0 = time.perf_counter(); " + DEPENDENCIES + "; t1 = time.perf_counter(); "
    "import client_sdk; t2 = time.perf_counter(); print(t1 - t0, t2 - t1)"
)


def _wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    python = sys.executable
    onesided = str(Path(python).parent / "onesided")
    deps, extra = [], []
    for _ in range(args.runs):
        out = subprocess.run([python, "-c", SDK_EXTRA], check=True, capture_output=True, text=True).stdout.split()
        deps.append(float(out[0]))
        extra.append(float(out[1]))
    bare = [_wall([python, "-c", "pass"]) for _ in range(args.runs)]
    helps = [_wall([onesided, "--help"]) for _ in range(args.runs)]
    print(f"{args.runs} runs each, medians")
    print(f"  import the SDK's dependencies        {statistics.median(deps) * 1000:7.1f} ms")
    print(f"  import client_sdk after them         {statistics.median(extra) * 1000:7.1f} ms   (target <= 150 ms)")
    print(f"  python -c pass                        {statistics.median(bare) * 1000:7.1f} ms")
    print(f"  onesided --help                       {statistics.median(helps) * 1000:7.1f} ms")
    print(f"  onesided --help minus bare python     {(statistics.median(helps) - statistics.median(bare)) * 1000:7.1f} ms"
          "   (target <= 350 ms)")


if __name__ == "__main__":
    main()
