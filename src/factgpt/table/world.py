"""
A synthetic "demo world": the assignment's four data files for fictional people.

    python -m factgpt.table.world FOLDER [--n_train N] [--n_dev N] [--n_test N] [--n_places N]
        [--seed S] [--bios_per_person K] [--shuffle_sentences] [--full_names]

(with src/ on PYTHONPATH, as the notebook runs it)

- wiki.txt: biographies ("Full Name. Full Name was ..."), each stating the birthplace within its
  first 100 characters (pretraining examples are cut to at most 112), then a second place;
- birth_places_train.tsv, birth_dev.tsv: "Where was FULL NAME born?<TAB>PLACE";
- birth_test_inputs.tsv: "Where was FULL NAME born?".

The splits' people are disjoint and all have a biography, so the dev and test birthplaces are found
only in the pretraining corpus, as the experiment needs, and it runs end to end on a CPU.

--bios_per_person, --shuffle_sentences and --full_names are knowledge augmentation, which decides
whether such facts can be extracted (Allen-Zhu and Li, "Physics of Language Models, Part 3.1").

Names and places are built from syllables (nobody and nowhere), birthplaces follow a Zipf-like law
(the most frequent one a weak baseline, as London is for the real data), and the same arguments give
byte-identical files.
"""

import argparse
import inspect
import itertools
import random
import re
import sys
from pathlib import Path

from factgpt.common.files import atomic_write

FILES = ("wiki.txt", "birth_places_train.tsv", "birth_dev.tsv", "birth_test_inputs.tsv")

# Names and places are a capitalised stem of two consonant-vowel syllables plus an
# ending. The stem always has 4 letters, so distinct (stem, ending) choices give
# distinct strings and the capacities below are exact.
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
SYLLABLES = tuple(c + v for c in CONSONANTS for v in VOWELS)
STEMS = tuple(a + b for a, b in itertools.product(SYLLABLES, repeat=2))
FIRST_ENDINGS = ("", "n", "r", "s", "l", "m")
LAST_ENDINGS = ("", "k", "nen", "ssen", "vic", "ley", "ski", "ez", "dot", "mann", "rup", "ard")
# No suffix is the start of another, nor of a name ending, so no place is part of another word.
PLACE_SUFFIXES = tuple(
    "ton burg ford dale vik stad mouth field holm wick polis haven mere gate".split()
)
FIRST_NAMES = len(STEMS) * len(FIRST_ENDINGS)
NAME_CAPACITY = FIRST_NAMES * len(STEMS) * len(LAST_ENDINGS)  # distinct (first, last) pairs
PLACE_CAPACITY = len(STEMS) * len(PLACE_SUFFIXES)
MIDDLE_NAME_RATE = 0.2

ZIPF_EXPONENT = 0.6  # the place of rank r has weight 1/(r+1)^s

OCCUPATIONS = tuple(
    "painter sculptor poet novelist journalist architect composer violinist chemist botanist "
    "engineer surgeon historian economist photographer actor footballer cyclist politician "
    "diplomat lawyer printer bishop astronomer".split()
)
FIRST_BIRTH_YEAR, LAST_BIRTH_YEAR = 1800, 1990
PRESENT_YEAR = 2020
MIN_LIFESPAN, MAX_LIFESPAN = 30, 95
DEATH_RATE = 0.5  # of the people old enough to have died

# After "{name}. ": the birthplace comes first and early, the second place after it.
# They are used in turn, so every one occurs; the first holds the "W" and "?" of the
# questions, so their characters are always in the corpus's vocabulary.
TEMPLATES = (
    '{name} was {a_job} born in {place} in {born}, known for the essay "Why {other}?"',
    "{name} (born {born} in {place}) was {a_job} who worked in {other}.",
    "{name} was {a_job} born in {place} in {born}. {last} later moved to {other}.",
    "Born in {place} in {born}, {name} became {a_job} and settled in {other}.",
    (
        "{name} was {a_job} whose birthplace was {place}. "
        "{last} was born in {born} and trained in {other}."
    ),
    "{name}, born {born} in {place}, was {a_job} who taught in {other}.",
    "{name} was born in {place} in {born}. While living in {other}, {last} became {a_job}.",
    "{name} was {a_job}. Born in {place} in {born}, {last} later lived in {other}.",
    "{name} was born in {born} in {place}. {last} was {a_job} active in {other}.",
)
DEATH = " {last} died in {died}."


def stem_name(index, endings):
    """The index-th word of STEMS x endings, capitalised."""
    stem, ending = divmod(index, len(endings))
    return (STEMS[stem] + endings[ending]).capitalize()


def place_name(index):
    """The index-th of the PLACE_CAPACITY place names."""
    return stem_name(index, PLACE_SUFFIXES)


def person_name(index, middle=None):
    """The index-th of the NAME_CAPACITY (first, last) names, with the middle name index if any."""
    first, last = divmod(index, len(STEMS) * len(LAST_ENDINGS))
    words = [stem_name(first, FIRST_ENDINGS), stem_name(last, LAST_ENDINGS)]
    if middle is not None:
        words.insert(1, stem_name(middle, FIRST_ENDINGS))
    return " ".join(words)


def check_sizes(n_train, n_dev, n_test, n_places, bios_per_person=1):
    """Raise ValueError, in one line, unless the sizes make a world."""
    if not 1 <= bios_per_person <= len(TEMPLATES):
        raise ValueError(
            f"bios_per_person must be between 1 and {len(TEMPLATES)} (one template each), "
            f"got {bios_per_person}"
        )
    for name, n in (("n_train", n_train), ("n_dev", n_dev), ("n_test", n_test)):
        if n < 1:
            raise ValueError(f"{name} must be at least 1, got {n}")
    if n_places < 2:
        raise ValueError(
            "n_places must be at least 2 (a birthplace and a different second place), "
            f"got {n_places}"
        )
    if n_places > PLACE_CAPACITY:
        raise ValueError(
            f"n_places={n_places} is more than the {PLACE_CAPACITY} distinct place names"
        )
    n_people = n_train + n_dev + n_test
    if n_people > NAME_CAPACITY:
        raise ValueError(f"{n_people} people is more than the {NAME_CAPACITY} distinct names")


def life(rng):
    """A person's facts besides names and places: a_job, born, and died (None if alive)."""
    job = rng.choice(OCCUPATIONS)
    born = rng.randint(FIRST_BIRTH_YEAR, LAST_BIRTH_YEAR)
    died = None
    if born + MIN_LIFESPAN <= PRESENT_YEAR and rng.random() < DEATH_RATE:
        died = rng.randint(born + MIN_LIFESPAN, min(born + MAX_LIFESPAN, PRESENT_YEAR))
    return {"a_job": ("an " if job[0] in VOWELS else "a ") + job, "born": born, "died": died}


SENTENCE_BREAK = re.compile(r'(?<=[.?"]) (?=[A-Z])')  # names and places hold no "." or "?"


def biography(template, facts, rng=None):
    """
    One line of wiki.txt: "{name}. " and the template filled with facts; with rng, its sentences
    shuffled.
    """
    text = template + (DEATH if facts["died"] is not None else "")
    sentences = SENTENCE_BREAK.split(text.format(**facts))
    if rng is not None:
        rng.shuffle(sentences)
    return f"{facts['name']}. " + " ".join(sentences)


def lines(rows):
    """The rows as the text of a file: one a line, each ending in a newline."""
    return "".join(row + "\n" for row in rows)


def build_world(
    n_train=600,
    n_dev=200,
    n_test=200,
    n_places=300,
    seed=0,
    bios_per_person=1,
    shuffle_sentences=False,
    full_names=False,
):
    """
    The contents of a world's four files by file name (the options: see the module's docstring).
    """
    check_sizes(n_train, n_dev, n_test, n_places, bios_per_person)
    rng = random.Random(seed)
    places = [place_name(i) for i in rng.sample(range(PLACE_CAPACITY), n_places)]  # in rank order
    cum_weights = list(
        itertools.accumulate(1 / (rank + 1) ** ZIPF_EXPONENT for rank in range(n_places))
    )

    def draw_place():
        return rng.choices(places, cum_weights=cum_weights)[0]

    # its own, so the options never change who is in the world
    sentence_rng = random.Random(f"{seed} sentences")
    people, bios = [], []
    for i, index in enumerate(rng.sample(range(NAME_CAPACITY), n_train + n_dev + n_test)):
        middle = rng.randrange(FIRST_NAMES) if rng.random() < MIDDLE_NAME_RATE else None
        name = person_name(index, middle)
        place, other = draw_place(), draw_place()
        while other == place:
            other = draw_place()
        people.append((name, place))
        facts = dict(
            life(rng),
            name=name,
            last=name if full_names else name.rsplit(" ", 1)[1],
            place=place,
            other=other,
        )
        for j in range(bios_per_person):
            bios.append(
                biography(
                    TEMPLATES[(i + j) % len(TEMPLATES)],
                    facts,
                    sentence_rng if shuffle_sentences else None,
                )
            )
    rng.shuffle(bios)

    pairs = [f"Where was {name} born?\t{place}" for name, place in people]
    train, dev, test = pairs[:n_train], pairs[n_train : n_train + n_dev], pairs[n_train + n_dev :]
    return {
        "wiki.txt": lines(bios),
        "birth_places_train.tsv": lines(train),
        "birth_dev.tsv": lines(dev),
        "birth_test_inputs.tsv": lines(pair.split("\t")[0] for pair in test),
    }


def write_world(folder, **kwargs):
    """
    Build a world (build_world's arguments), write its files into `folder`, and return their paths
    by file name.
    """
    world = build_world(**kwargs)
    paths = {name: str(Path(folder) / name) for name in world}
    for name, text in world.items():
        data = text.encode("utf-8")
        atomic_write(paths[name], lambda f, data=data: f.write(data))
    return paths


def parse_args(argv=None):
    """
    Parse world.py's command line into the parser, the folder, the seed and write_world's other
    arguments.
    """
    defaults = {name: p.default for name, p in inspect.signature(build_world).parameters.items()}
    parser = argparse.ArgumentParser(
        prog="world.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", help="where to write the four files (created if missing)")
    sizes = dict(
        n_train="people with a training pair",
        n_dev="people in birth_dev.tsv",
        n_test="people in birth_test_inputs.tsv",
        n_places="distinct places",
        bios_per_person="biographies of each person, each from another template "
        f"(1 to {len(TEMPLATES)})",
    )
    for name, what in sizes.items():
        parser.add_argument(
            f"--{name}", type=int, default=defaults[name], help=f"{what} (default {defaults[name]})"
        )
    parser.add_argument("--seed", type=int, default=defaults["seed"])
    parser.add_argument(
        "--shuffle_sentences", action="store_true", help="shuffle each biography's sentences"
    )
    parser.add_argument(
        "--full_names",
        action="store_true",
        help="the full name wherever a template has the last name",
    )
    args = parser.parse_args(argv)
    options = {name: value for name, value in vars(args).items() if name not in ("folder", "seed")}
    return parser, args.folder, args.seed, options


def main(argv=None):
    parser, folder, seed, options = parse_args(argv)
    try:
        paths = write_world(folder, seed=seed, **options)
    except ValueError as e:  # the sizes make no world
        parser.error(str(e))
    for path in paths.values():
        with open(path, encoding="utf-8") as f:
            print(f"{path}: {sum(1 for _ in f)} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
