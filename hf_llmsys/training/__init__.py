"""Training jobs on one skeleton (`job.py`, `checkpoints.py`, `output_dir.py`); their command lines are
``hf_llmsys/cli/train.py``, ``sft.py`` and ``dpo.py``, which parse the flags into the jobs' dataclasses.

- `llmsys train`: causal pre-training (`train.py`) or T5 span corruption (`seq2seq_train.py`);
- `llmsys sft` / `sft(...)`: instruction tuning on Alpaca records (`sft.py`).
- `llmsys dpo` / `hf_llmsys.training.dpo.dpo(...)`: preference tuning on TRL's DPOTrainer (`dpo.py`; not imported
  here: it needs the `dpo` extra).

Note: the name `hf_llmsys.training.sft` is the Python API function (the job's module stays importable as
``from hf_llmsys.training.sft import run_sft``).
"""

from .sft import sft

__all__ = ["sft"]
