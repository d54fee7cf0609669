"""
What one training needs beside the course's Trainer: the step's arithmetic (step.py), batches,
capture, checkpoints, params files, adapters, what a stage trains on, and its reports. The course's
trainer.py imports it; it never imports the readout or the pipeline.
"""
