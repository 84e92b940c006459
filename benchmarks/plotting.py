"""What the benchmarks share for their plots: matplotlib without a display, and where a PNG goes.

Plots are written next to the printed tables, by default under benchmarks/out/ (git-ignored); matplotlib comes
with the `bench` extra (`pip install -e '.[bench]'`). A benchmark's figures never depend on its plot: without
matplotlib a plot function decorated with `skipped_without_matplotlib` prints a one-line note instead, and the
benchmark ends as it would have.
"""

import functools
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec

P = ParamSpec("P")

OUT_DIR = Path(__file__).resolve().parent / "out"


def default_plot_path(benchmark: str) -> Path:
    return OUT_DIR / f"{benchmark}.png"


def skipped_without_matplotlib(draw: Callable[P, None]) -> Callable[P, None]:
    @functools.wraps(draw)
    def draw_if_possible(*args: P.args, **kwargs: P.kwargs) -> None:
        if importlib.util.find_spec("matplotlib") is None:
            print("plot skipped: matplotlib is not installed (pip install -e '.[bench]')")
            return
        draw(*args, **kwargs)

    return draw_if_possible


def figure(rows: int = 1, columns: int = 1, *, width: float = 6.0, height: float = 4.0) -> tuple[Any, Any]:
    """A figure and its axes (an array when there are several), drawn off-screen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)


def save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")
