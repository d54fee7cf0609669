"""
The library API of a run: pretrain(cfg), finetune(cfg), evaluate(cfg) and recall(cfg) for a
settings.run_config.RunConfig, with no argparse inside, and load(cfg), the corpus and model a
research script reads. run.py is a thin command line over these; the table, the demo and the
research scripts call them.
"""

from factgpt.pipeline.api import evaluate, finetune, pretrain, recall
from factgpt.pipeline.start import load

__all__ = ["pretrain", "finetune", "evaluate", "recall", "load"]
