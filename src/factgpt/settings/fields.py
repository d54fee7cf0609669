"""
How a setting is declared and read: a dataclass field's metadata (what it applies to, its
range, its help), and its value from text.
"""

import dataclasses
import math
from typing import Optional

from factgpt.common.errors import RunError

BOOLEANS = {"yes": True, "no": False, "true": True, "false": False, "1": True, "0": False}
NUMBERS = (int, float, Optional[int], Optional[float])  # the fields whose range is checked
RANGE = ("at_least_zero", "below", "at_most")  # check_number's bounds
TRAINING_KINDS = ("pretraining", "finetuning")  # a setting's `training`, where only one reads it
RULES = dict(
    size=False,
    choices=(),
    at_least_zero=False,
    below=None,
    stage=None,
    trainer=False,
    training=None,
    reading=False,
    help=None,
)


def setting(default=None, **rules):
    """
    A Recipe field's default and what it applies to, said once (RULES, with their defaults). size:
    it shapes the params. choices: its values, the first by default. at_least_zero, below: its range
    (else positive). stage: the Stage field it fills where a stage leaves it None. trainer: the
    Trainer reads it. training: only "pretraining" or only "finetuning" reads it (None: both, or
    neither where it is reading). reading: only evaluate reads it. help: its flag's line in run.py
    --help.
    """
    unknown = set(rules) - set(RULES)
    if unknown:
        raise TypeError(f"setting() has no rule {', '.join(sorted(unknown))}")
    if rules.get("training") not in (None, *TRAINING_KINDS):
        raise TypeError(f"setting(training=...) must be one of {', '.join(TRAINING_KINDS)}")
    metadata = RULES | rules
    return dataclasses.field(
        default=metadata["choices"][0] if metadata["choices"] else default, metadata=metadata
    )


def path(role, needed_by=()):
    """
    A RunConfig path: a file the run reads ("input") or writes ("output"), which the functions
    `needed_by` need.
    """
    return dataclasses.field(default=None, metadata=dict(role=role, needed_by=needed_by))


def text_name(field):
    """A field's name as a user writes it: its `text` name where it has one (a Stage's epochs)."""
    return field.metadata.get("text", field.name)


def value_type(annotation):
    """bool, int or float: what a field annotated `annotation` (e.g. Optional[int]) holds."""
    return next(kind for kind in (bool, int, float) if kind.__name__ in str(annotation))


def check_number(name, value, at_least_zero=False, below=None, at_most=None):
    """
    RunError unless `value` is a finite number in its range: positive (or at least 0), below or at
    most a bound.
    """
    if not (isinstance(value, (int, float)) and math.isfinite(value)):
        raise RunError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not at_least_zero):
        raise RunError(
            f"{name} must be {'at least 0' if at_least_zero else 'positive'}, got {value}"
        )
    if below is not None and value >= below:
        raise RunError(f"{name} must be below {below}, got {value}")
    if at_most is not None and value > at_most:
        raise RunError(f"{name} must be at most {at_most}, got {value}")


def check_fields(settings, where=""):
    """
    RunError, its name starting with `where`, for a number of a dataclass outside the range its
    field's metadata gives, or a value outside its choices. A None is left unchecked.
    """
    for field in dataclasses.fields(settings):
        value, rules = getattr(settings, field.name), field.metadata
        name = where + text_name(field)
        if value is not None and field.type in NUMBERS:
            check_number(name, value, **{rule: rules[rule] for rule in RANGE if rule in rules})
        if rules.get("choices") and value not in rules["choices"]:
            raise RunError(f"{name} must be one of {', '.join(rules['choices'])}, got {value!r}")


def parse_value(kind, text, where=""):
    """`text` as a value of the type `kind` (bool, int, float or str); `where` starts the error."""
    try:
        return BOOLEANS[text.lower()] if kind is bool else kind(text)
    except (KeyError, ValueError):
        what = f"{text!r} is not a{'n' if kind is int else ''} {kind.__name__}"
        what += f" ({', '.join(BOOLEANS)})" if kind is bool else ""
        raise RunError(f"{where}: {what}" if where else what) from None
