"""Figures of a training run, read from its logs (matplotlib, loaded only when a figure is drawn).

- `panels`: what the training-curve figure draws (its panels and lines) and which of them a run has data for;
- `canvas`: a matplotlib figure that needs no display;
- `figures`: the training curves, the reasoning-regime plane (the paper's Figure 1), and all figures of a run;
- `gradients`: the gradient SNR report's figure (the paper's Figure 3).
"""
