"""SNR-filtered GRPO under DeepSpeed ZeRO on CPU (launched by tests/test_deepspeed.py with torchrun).

Two generations of 4 optimizer steps (8 micro-steps of 2 rows, GA 2); each generation's 4 kept rows fill its first
optimizer step, so the other three are empty. AdamW with weight decay. Saves the parameters after every optimizer
step to `<out>/<mode>.pt`, `mode` being `zero<stage>` or `plain` (the same run without DeepSpeed).
"""

import os
import sys
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer  # noqa: E402
from trl_ragen2.models.tiny import make_tiny_model, make_tiny_tokenizer  # noqa: E402


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripted import AMPLITUDES, dataset, parity_reward_for, script_generation, tiny_trainer_args  # noqa: E402


class ParameterRecorder(TrainerCallback):
    def __init__(self, zero3: bool):
        self.steps, self.zero3 = [], zero3

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.zero3:  # parameters are partitioned: gather them to read them whole
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(model.parameters())):
                self.steps.append({n: p.detach().clone().float() for n, p in model.named_parameters()})
        else:
            self.steps.append({n: p.detach().clone().float() for n, p in model.named_parameters()})


def skip_the_shared_memory_all_reduce():
    """One process has no peer to all-reduce with, so DeepSpeed's shared-memory all-reduce (a C++ op it compiles on
    first use on CPU, minutes on 2 cores) is never called: DeepSpeed's communication falls back to torch.distributed
    without it, as on a build that cannot compile it."""
    import importlib

    # by module name: the attribute `deepspeed.comm.torch` is the torch package, which deepspeed.comm imports
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


def main(out_dir, mode):
    deepspeed = None
    if mode.startswith("zero"):
        skip_the_shared_memory_all_reduce()
        deepspeed = {
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto",
            "zero_optimization": {"stage": int(mode[-1])},
        }
    args = tiny_trainer_args(
        Path(out_dir) / mode,
        SNRFilteredGRPOConfig,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        steps_per_generation=8,
        max_steps=8,
        optim="adamw_torch",
        weight_decay=0.1,
        mi_diagnostics=False,
        deepspeed=deepspeed,
    )
    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(make_tiny_tokenizer(), seed=0),
        reward_funcs=parity_reward_for(AMPLITUDES),
        args=args,
        train_dataset=dataset(list(AMPLITUDES) * 2),
        processing_class=make_tiny_tokenizer(),
    )
    script_generation(trainer)
    recorder = ParameterRecorder(zero3=mode == "zero3")
    trainer.add_callback(recorder)
    trainer.train()
    logs = trainer.state.log_history
    skipped = [log["ragen2/filter/skipped_updates"] for log in logs if "ragen2/filter/skipped_updates" in log]
    torch.save({"steps": recorder.steps, "skipped": skipped}, os.path.join(out_dir, f"{mode}.pt"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
