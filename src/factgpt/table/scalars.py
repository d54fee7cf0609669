"""
A TensorBoard scalar read back from the event files, run by run: what the notebook plots of a
training that logs.py wrote.
"""

import os


def scalar_series(log_root, tag="train/epoch_loss"):
    """One scalar's (step, value) points in each TensorBoard run under log_root, by run folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series = {}
    for folder in sorted(os.listdir(log_root)) if os.path.isdir(log_root) else []:
        events = EventAccumulator(os.path.join(log_root, folder))
        events.Reload()
        if tag in events.Tags().get("scalars", []):
            series[folder] = [(event.step, event.value) for event in events.Scalars(tag)]
    return series
