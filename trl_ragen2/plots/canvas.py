"""A matplotlib figure that draws without a display, shared by every figure of `trl_ragen2.plots`.

The figure is built on the Agg canvas directly, never through `pyplot`, so drawing leaves no global figure state
behind and works on machines without a display; matplotlib is imported only when a figure is made.
"""

from __future__ import annotations


def new_figure(**kwargs):
    """A `matplotlib.figure.Figure` with constrained layout on an Agg canvas; `kwargs` go to `Figure`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(layout="constrained", **kwargs)
    FigureCanvasAgg(figure)  # attaches itself as figure.canvas
    return figure
