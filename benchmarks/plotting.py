"""What the benchmarks share for their plots: matplotlib without a display, and where a PNG goes.

Plots are written next to the printed tables, by default under benchmarks/out/ (git-ignored); matplotlib comes
with the `bench` extra (`pip install -e '.[bench]'`).
"""

from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).resolve().parent / "out"


def default_plot_path(benchmark: str) -> Path:
    return OUT_DIR / f"{benchmark}.png"


def figure(rows: int = 1, columns: int = 1, *, width: float = 6.0, height: float = 4.0) -> tuple[Any, Any]:
    """A figure and its axes (an array when there are several), drawn off-screen."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("the plots need matplotlib: pip install -e '.[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)


def save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")
