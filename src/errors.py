"""
RunError, the one type of every problem a run reports in one line (run.py: exit code 2):
bad input, params or a checkpoint that do not fit, a training that diverged, a write
that failed. The library raises it where it finds the problem; only the command line catches it.
"""


class RunError(Exception):
    """A problem that stops a run, said in one line: what is wrong, and where."""


def short_reason(error):
    """An exception's message cut to its first sentence, for one-line reports."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text.split(". ")[0]
