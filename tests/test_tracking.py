"""Experiment tracking: the local-first tracker (trackio) receives every ragen2/ metric, offline."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent

# One scripted filtered step (tests/scripted.py) reporting to trackio; prints the logged ragen2/ keys.
TRAIN = """
import json, sys
from tests.scripted import scripted_trainer
from trl_ragen2.models.tiny import make_tiny_tokenizer
from pathlib import Path
trainer = scripted_trainer(Path(sys.argv[1]), make_tiny_tokenizer(), report_to="trackio", project="ragen2-test")
trainer.train()
print(json.dumps(sorted({k for entry in trainer.state.log_history for k in entry if k.startswith("ragen2/")})))
"""


def test_trackio_receives_the_ragen2_metrics_offline(tmp_path):
    # trackio reads TRACKIO_DIR when it is imported, hence a fresh process
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", TRAIN, str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    expected = set(json.loads(result.stdout.strip().splitlines()[-1]))
    assert {"ragen2/filter/kept_fraction", "ragen2/mi/first_turn/retrieval_acc"} <= expected
    with sqlite3.connect(tmp_path / "trackio" / "ragen2-test.db") as connection:
        rows = connection.execute("select metrics from metrics").fetchall()
    logged = set()
    for (metrics,) in rows:
        logged |= set(json.loads(metrics))
    assert expected <= {key.removeprefix("train/") for key in logged}
