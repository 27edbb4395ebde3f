"""PNG plots of benchmark results (matplotlib, drawn off-screen)."""

from collections.abc import Mapping, Sequence
from pathlib import Path

Series = Mapping[str, Sequence[tuple[float, float]]]


def lines(path: Path, title: str, xlabel: str, ylabel: str, series: Series,
          right: Series | None = None, right_label: str = "") -> Path:
    """Draw each series as a line (x, y pairs); `right` series use a second y axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    for label, points in series.items():
        axes.plot([x for x, _ in points], [y for _, y in points], label=label, marker=None
                  if len(points) > 30 else "o")
    handles, labels = axes.get_legend_handles_labels()
    if right:
        other = axes.twinx()
        for label, points in right.items():
            other.plot([x for x, _ in points], [y for _, y in points], label=label,
                       linestyle="--", color="grey")
        other.set_ylabel(right_label)
        more = other.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(handles, labels, loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
