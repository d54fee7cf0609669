"""The synthetic demo world: its files, splits, biographies and command line."""

import collections
import os
import re
import stat
import subprocess
import sys

import pytest

from conftest import ROOT
from dataset import CharCorruptionDataset, NameDataset
from factgpt.table import world

QUESTION = "Where was {} born?"


def run_world(*args):
    """Run the world's generator as the notebook does, in a fresh interpreter: (exit code, stdout, stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "factgpt.table.world", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
    )
    return done.returncode, done.stdout, done.stderr


def name_of(question):
    assert question.startswith("Where was ") and question.endswith(" born?")
    return question[len("Where was ") : -len(" born?")]


def pairs(text):
    """{name: place} of a question<TAB>place file."""
    rows = [line.split("\t") for line in text.splitlines()]
    assert all(len(row) == 2 for row in rows)
    return {name_of(q): place for q, place in rows}


@pytest.fixture(scope="module")
def default_world():
    return world.build_world()


@pytest.fixture(scope="module")
def people(default_world):
    """The default world parsed: train and dev {name: place}, test names, {name: biography}."""
    test_names = [name_of(q) for q in default_world["birth_test_inputs.tsv"].splitlines()]
    bios = collections.defaultdict(list)
    for line in default_world["wiki.txt"].splitlines():
        bios[line.split(". ", 1)[0]].append(line)
    return pairs(default_world["birth_places_train.tsv"]), pairs(default_world["birth_dev.tsv"]), test_names, bios


def test_deterministic(default_world):
    assert world.build_world() == default_world
    assert world.build_world(seed=0) == default_world
    other = world.build_world(seed=1)
    assert all(other[name] != default_world[name] for name in world.FILES)


def test_file_formats(default_world):
    assert tuple(default_world) == world.FILES
    for name, text in default_world.items():
        assert text.endswith("\n") and not text.endswith("\n\n"), name
        assert "" not in text[:-1].split("\n"), name
        assert text.isascii() and "\r" not in text, name
    for name in ("birth_places_train.tsv", "birth_dev.tsv"):
        for line in default_world[name].splitlines():
            question, place = line.split("\t")
            assert place and len(line) < 100
    test_lines = default_world["birth_test_inputs.tsv"].splitlines()
    assert all("\t" not in q and q.startswith("Where was ") and q.endswith(" born?") for q in test_lines)


def test_sizes_and_disjoint_splits(people):
    train, dev, test_names, bios = people
    assert (len(train), len(dev), len(test_names)) == (600, 200, 200)
    assert len(set(test_names)) == len(test_names)
    assert not set(train) & set(dev) and not set(train) & set(test_names) and not set(dev) & set(test_names)
    assert set(bios) == set(train) | set(dev) | set(test_names)


def test_names_and_places_are_plain(default_world, people):
    train, dev, test_names, _ = people
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ -'")
    for name in [*train, *dev, *test_names, *train.values(), *dev.values()]:
        assert set(name) <= allowed and 2 <= len(name) <= 30, name
    assert len(set(train.values()) | set(dev.values())) <= 300


def test_every_held_out_person_has_exactly_one_biography(default_world, people):
    train, dev, test_names, _ = people
    lines = default_world["wiki.txt"].splitlines()
    assert len(lines) == 1000
    starts = collections.Counter(line.split(". ", 1)[0] for line in lines)
    for name in [*dev, *test_names]:
        assert starts[name] == 1 and name not in train
        assert sum(line.startswith(name + ". ") for line in lines) == 1


def test_birthplace_stated_early_and_second_place_after_it(people):
    train, dev, _, bios = people
    place_word = re.compile(r"\b[A-Z][a-z]{3}(?:%s)\b" % "|".join(world.PLACE_SUFFIXES))
    for name, place in {**train, **dev}.items():
        (bio,) = bios[name]
        assert bio.startswith(f"{name}. ")
        mentioned = place_word.findall(bio)
        assert len(mentioned) == 2 and mentioned[0] == place != mentioned[1], bio
        assert bio.index(place) + len(place) <= 100, bio


def test_augmented_biographies_repeat_the_same_facts():
    """K biographies per person, from K templates, with the same birthplace, birth year and full name."""
    plain = world.build_world(n_train=40, n_dev=10, n_test=10, n_places=20, seed=3)
    augmented = world.build_world(
        n_train=40, n_dev=10, n_test=10, n_places=20, seed=3, bios_per_person=3, shuffle_sentences=True, full_names=True
    )
    assert all(augmented[f] == plain[f] for f in world.FILES[1:]), "the same people, places and splits"
    bios = collections.defaultdict(list)
    for line in augmented["wiki.txt"].splitlines():
        bios[line.split(". ", 1)[0]].append(line)
    places = {**pairs(plain["birth_places_train.tsv"]), **pairs(plain["birth_dev.tsv"])}
    assert len(bios) == 60 and all(len(lines) == 3 and len(set(lines)) == 3 for lines in bios.values())
    for name, place in places.items():
        years = [set(re.findall(r"\b1[89]\d\d\b", bio)) for bio in bios[name]]
        assert all(place in bio for bio in bios[name]) and years[0] == years[1] == years[2], bios[name]
        last = name.rsplit(" ", 1)[1]
        assert all(bio.count(last) == bio.count(name) for bio in bios[name]), "full names only"


def test_sentences_are_shuffled_whole():
    """Shuffling reorders each biography's sentences and changes nothing else."""
    kwargs = dict(n_train=30, n_dev=5, n_test=5, n_places=10, seed=1, bios_per_person=2)
    plain = world.build_world(**kwargs)["wiki.txt"].splitlines()
    shuffled = world.build_world(shuffle_sentences=True, **kwargs)["wiki.txt"].splitlines()

    def sentences(line):
        name, body = line.split(". ", 1)
        return name, sorted(world.SENTENCE_BREAK.split(body))

    assert [sentences(line) for line in shuffled] == [sentences(line) for line in plain]
    assert sum(a != b for a, b in zip(plain, shuffled)) > 20


def test_birthplaces_are_skewed(people):
    train, dev, _, _ = people
    share = collections.Counter(dev.values()).most_common(1)[0][1] / len(dev)
    assert 1 / 300 < share < 0.15
    assert len(set(train.values())) > 50  # far from a constant answer


def test_question_characters_are_in_the_corpus():
    for sizes in [dict(), dict(n_train=1, n_dev=1, n_test=1, n_places=2, seed=3)]:
        files = world.build_world(**sizes)
        vocab = set(files["wiki.txt"])
        for name in world.FILES[1:]:
            assert set(files[name]) - {"\t", "\n"} <= vocab, (sizes, name)


def test_project_datasets_read_the_world(default_world):
    corruption = CharCorruptionDataset(default_world["wiki.txt"], 128)
    assert len(corruption) == 1000
    x, y = corruption[0]
    assert x.shape == y.shape == (127,)
    names = NameDataset(corruption, default_world["birth_places_train.tsv"])
    assert len(names) == 600 and names.dropped_characters == 0
    for i in range(len(names)):
        names[i]  # every example fits in the block
    assert NameDataset(corruption, default_world["birth_dev.tsv"]).dropped_characters == 0


def test_write_world(tmp_path):
    folder = tmp_path / "new" / "world"
    paths = world.write_world(folder, n_train=30, n_dev=10, n_test=5, n_places=20, seed=2)
    assert set(paths) == set(world.FILES)
    expected = world.build_world(n_train=30, n_dev=10, n_test=5, n_places=20, seed=2)
    for name, path in paths.items():
        with open(path, "rb") as f:
            assert f.read() == expected[name].encode("utf-8")
    assert sorted(p.name for p in folder.iterdir()) == sorted(world.FILES)  # no temporary files left
    (tmp_path / "opened").write_text("")
    assert {stat.S_IMODE(os.stat(path).st_mode) for path in [*paths.values(), tmp_path / "opened"]} == {
        stat.S_IMODE((tmp_path / "opened").stat().st_mode)
    }, "the mode of any new file"


@pytest.mark.parametrize(
    "sizes",
    [
        dict(n_train=0),
        dict(n_dev=-1),
        dict(n_places=0),
        dict(n_places=1),
        dict(n_places=world.PLACE_CAPACITY + 1),
        dict(n_train=world.NAME_CAPACITY),
        dict(bios_per_person=0),
        dict(bios_per_person=len(world.TEMPLATES) + 1),
    ],
)
def test_bad_sizes_raise(sizes):
    with pytest.raises(ValueError):
        world.build_world(**sizes)


def test_cli_writes_the_files(tmp_path):
    code, out, err = run_world(
        tmp_path / "w", "--n_train", 40, "--n_dev", 10, "--n_test", 10, "--n_places", 25, "--seed", 5
    )
    assert code == 0, err
    assert out.splitlines() == [f"{tmp_path / 'w' / name}: {n} lines" for name, n in zip(world.FILES, [60, 40, 10, 10])]
    expected = world.build_world(n_train=40, n_dev=10, n_test=10, n_places=25, seed=5)
    assert all((tmp_path / "w" / name).read_text(encoding="utf-8") == expected[name] for name in world.FILES)


def test_cli_passes_the_augmentation_options(tmp_path):
    code, out, err = run_world(
        tmp_path / "w",
        "--n_train",
        20,
        "--n_dev",
        5,
        "--n_test",
        5,
        "--n_places",
        10,
        "--bios_per_person",
        2,
        "--shuffle_sentences",
        "--full_names",
    )
    assert code == 0, err
    expected = world.build_world(
        n_train=20, n_dev=5, n_test=5, n_places=10, bios_per_person=2, shuffle_sentences=True, full_names=True
    )
    assert all((tmp_path / "w" / name).read_text(encoding="utf-8") == expected[name] for name in world.FILES)


@pytest.mark.parametrize(
    "args",
    [
        ["--n_train", "-1"],
        ["--n_places", "0"],
        ["--n_test", "x"],
        ["--n_train", str(world.NAME_CAPACITY)],
        ["--bios_per_person", "0"],
    ],
)
def test_cli_rejects_bad_sizes(tmp_path, args):
    code, out, err = run_world(tmp_path / "w", *args)
    assert code == 2 and "error:" in err and not out
    assert not (tmp_path / "w").exists()


def test_does_not_import_torch():
    code = subprocess.run(
        [sys.executable, "-c", "import sys; from factgpt.table import world; assert 'torch' not in sys.modules"],
        cwd=ROOT / "src",
        timeout=60,
    ).returncode
    assert code == 0
