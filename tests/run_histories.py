"""Synthetic training logs for the figure, summary and command-line tests: a 20-step run with gaps, and a writer
of `trainer_state.json` folders."""

import json
import math


MI = "ragen2/mi/trajectory"
# One diagnostic point per regime (x = H(Z|X), y = MI-Est), against the default thresholds 0.5 / 0.05.
REGIME_POINTS = {
    1: (1.2, 0.30, "diverse reasoning"),
    5: (1.0, 0.01, "template collapse"),
    10: (0.2, 0.20, "compressed reasoning"),
    15: (0.1, 0.00, "low-entropy collapse"),
}


def make_history():
    """Train logs for steps 1..20 with gaps (None, NaN, missing keys), eval logs at 10 and 20, MI every 5 steps."""
    history = []
    for step in range(1, 21):
        record = {"step": step, "loss": 0.5, "reward": step / 10, "reward_std": 0.1, "step_time": 2.0 + step}
        record["ragen2/filter/kept_fraction"] = None if step == 3 else (math.nan if step == 4 else 1.0 - step / 40)
        if step != 7:
            record["ragen2/env/sokoban/success_rate"] = step / 100
        if step in REGIME_POINTS:
            entropy, mi, _ = REGIME_POINTS[step]
            record.update({f"{MI}/cond_entropy": entropy, f"{MI}/mi_est": mi, f"{MI}/retrieval_acc": 0.5})
        history.append(record)
        if step % 10 == 0:
            history.append({"step": step, "eval_reward": step / 20, "eval_ragen2/env/sokoban/success_rate": 0.3})
    return history


def write_state(path, history):
    path.mkdir(parents=True, exist_ok=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": history[-1]["step"], "log_history": history}))
    return path
