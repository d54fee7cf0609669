"""
The corpus and the question files as a run reads them, and other views of the biographies. It
stands on common and the course's dataset; settings, training and readout import it.
"""
