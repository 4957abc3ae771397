"""What the scenarios' plots share: matplotlib on the Agg backend (imported when a plot is drawn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, title: str) -> None:
    """Title ``fig``, write it to ``path`` (PNG, 110 dpi) and close it."""
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
