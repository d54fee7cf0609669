"""
How a model is asked: decoding with a KV cache, the question readout, the frames readout (frames,
candidates, the learned choice, fitting and keeping it), recall probes and scores. It never imports
training; the pipeline imports it.
"""
