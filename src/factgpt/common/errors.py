"""
RunError, for every problem that stops a run: the library raises it where it finds the problem, and
only the command line catches it, to report it in one line (run.py exits with code 2).
"""


class RunError(Exception):
    """
    A problem that stops a run: bad input, params that do not fit, a diverged training, a failed
    write.
    """


def short_reason(error):
    """An exception's message cut to its first sentence, for one-line reports."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text.split(". ")[0]
