"""
The frames of the frames readout, mined from the training people's biographies.

A frame is the text a biography puts before a birthplace, with the person's name as NAME:
"NAME. Born in ", "NAME. NAME was born in ". It is kept where enough training people share it.
"""

import collections
import dataclasses
import math
import re

from dataset import MASK_CHAR
from factgpt.common.errors import RunError
from factgpt.common.questions import biographies, name_of

NAME = "NAME"
MOST_WORDS = 3  # a frame is at most the last three words before the place
# a frame is kept where at least this share of the training people (and two) share it
MIN_SHARE = 0.01
# where a written biography names a place: after "born", a bracket or " in "
PLACE_CUE = r"[Bb]orn[ ,]|\(| in "


def names_in(pairs):
    """The name of each (question, place) pair's question."""
    return [name_of(question) for question, _ in pairs]


def names_of(rows, path, stoi=None):
    """
    The name of each question of the rows read from `path`. RunError at the first that is not
    "Where was NAME born?", or whose name the vocabulary `stoi`, if given, cannot spell.
    """
    names = []
    for line, question, *_ in rows:
        try:
            names.append(name_of(question))
        except ValueError as e:
            raise RunError(
                f"{path}, line {line}: {e}; the frames readout asks only that question"
            ) from None
        unknown = sorted(set(names[-1]) - set(stoi or names[-1]))
        if unknown:
            raise RunError(
                f"{path}, line {line}: the name {names[-1]!r} has characters the corpus lacks: "
                f"{unknown}"
            )
    return names


def prompt(frame, name):
    """The frame asked about one person."""
    return frame.replace(NAME, name)


def place_in(text, skips=frozenset()):
    """
    The place a continuation names: its capitalised words up to a comma, full stop, semicolon or
    bracket, after any date ("3 April 1920 in "). "New York City, New York" gives "New York City".
    """
    words = text.split("\n")[0].lstrip(" ").split(" ")
    while words and (
        re.search(r"\d", words[0]) or words[0].strip(",") in skips or not words[0].strip(",-")
    ):
        words.pop(0)
    place = []
    for word in words:
        head = re.match(r"[^,.;()]*", word).group()
        if not head or not head[0].isupper():
            break
        place.append(head)
        if head != word:
            break
    return " ".join(place)


def places_named(text, skips=frozenset(), most=2):
    """
    The first `most` distinct places a written biography names, each read (place_in) after a
    PLACE_CUE, up to its first mask: the model writes a span corruption's masked content after it.
    """
    text = text.split(MASK_CHAR)[0]
    named = (place_in(text[cue.end() :], skips) for cue in re.finditer(PLACE_CUE, text))
    return list(dict.fromkeys(place for place in named if place))[:most]


def date_before(before):
    """
    Where the date that ends `before` starts (its first digit in the last 40 characters), or None.
    """
    digit = re.search(r"\d", before[-40:])
    return None if digit is None else len(before) - len(before[-40:]) + digit.start()


def frames_ending(name, before, space):
    """
    The frames made of the last 1 to MOST_WORDS words of `before`, then `space`; where the
    words open the biography, the frame is all of them. No frame holds a digit or the surname.
    """
    surname = name.split(" ")[-1]
    if before.startswith(name):  # "NAME. NAME (born ", "NAME. NAME, born "
        rest = before[len(name) :]
        words = rest.split()
        texts = [
            NAME + rest if n == len(words) else f"{NAME} " + " ".join(words[-n:])
            for n in range(1, min(MOST_WORDS, len(words)) + 1)
        ]
    elif len(before.split()) <= MOST_WORDS:
        # words that open the biography are its frame: "NAME. Born in "
        texts = [before]
    else:
        texts = [f"{NAME} " + " ".join(before.split()[-n:]) for n in range(1, MOST_WORDS + 1)]
    return [
        f"{NAME}. {text}{space}"
        for text in texts
        if not re.search(r"\d", text) and surname not in text.split()
    ]


def frames_before(name, body, place):
    """
    One person's frames, as two lists: those of the words right before `place` in `body`,
    and, where a date comes before the place ("(born 3 April 1920 in "), those before the date.
    """
    at = body.find(place)
    if at <= 0 or not body[:at].strip():
        return [], []
    before = body[:at].rstrip(" ")
    date = date_before(before)
    kept = before[:date].rstrip(" ") if date else ""
    dated = frames_ending(name, kept, before[len(kept) : date]) if kept else []
    return frames_ending(name, before, body[len(before) : at]), dated


@dataclasses.dataclass(frozen=True)
class Mined:
    """What the training people's biographies say before their birthplace."""

    frames: list  # (frame, how many people have it), the most shared first, then in text order
    scorers: tuple  # the frames that come right before the place, not before a date
    # the words of the dates before a place besides their numbers ("in", "born", the months)
    skips: frozenset


def mine(documents, pairs, min_people):
    """
    The frames and the date words that at least `min_people` of the pairs' people have in their
    biography.
    """
    bios = biographies(documents, names_in(pairs))
    counts, right_before, skips = (
        collections.Counter(),
        collections.Counter(),
        collections.Counter(),
    )
    for name, (_, place) in zip(names_in(pairs), pairs):
        body = bios.get(name, "")
        before_place, before_date = frames_before(name, body, place)
        counts.update(set(before_place + before_date))
        right_before.update(set(before_place))
        at = body.find(place)
        date = date_before(body[:at]) if at > 0 else None
        if date is not None:
            skips.update({word for word in body[date:at].split() if not re.search(r"\d", word)})
    shared = sorted(
        ((f, people) for f, people in counts.items() if people >= min_people),
        key=lambda f: (-f[1], f[0]),
    )
    return Mined(
        shared,
        tuple(frame for frame, _ in shared if right_before[frame] >= min_people),
        frozenset(word for word, people in skips.items() if people >= min_people),
    )


def least_people(pairs):
    """
    How many of the training pairs' people must share a frame, or a date word, for it to be mined.
    """
    return max(2, math.ceil(MIN_SHARE * len(pairs)))
