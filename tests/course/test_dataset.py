"""The span-corruption and birthplace datasets, to the handout's specification."""

import random
import statistics

import pytest
import torch

from dataset import MASK_CHAR, PAD_CHAR, CharCorruptionDataset, NameDataset

DOC = "".join(chr(ord("a") + i % 26) for i in range(300))  # one long document, no mask or pad


def decode(dataset, ids):
    return "".join(dataset.itos[int(i)] for i in ids)


def parse_example(dataset, x, y):
    """(prefix, masked_content, suffix, pad count) of one example; asserts its layout."""
    assert x.dtype == torch.long and y.dtype == torch.long
    assert x.shape == y.shape == (dataset.block_size - 1,)
    assert torch.equal(x[1:], y[:-1])
    full = decode(dataset, x) + decode(dataset, y[-1:])
    assert len(full) == dataset.block_size
    body = full.rstrip(PAD_CHAR)
    assert PAD_CHAR not in body
    prefix, suffix, masked = body.split(MASK_CHAR)
    return prefix, masked, suffix, len(full) - len(body)


def test_vocabulary_layout():
    ds = CharCorruptionDataset("hello world\nzebra\n", 16)
    assert ds.stoi[PAD_CHAR] == 0 and ds.stoi[MASK_CHAR] == 1
    assert [ds.itos[i] for i in range(2, ds.vocab_size)] == sorted(set("hello world\nzebra\n"))
    assert ds.vocab_size == len(set("hello world\nzebra\n")) + 2
    assert all(ds.stoi[ds.itos[i]] == i for i in range(ds.vocab_size))
    assert ds.block_size == 16
    assert PAD_CHAR == "\u25a1" and MASK_CHAR == "\u2047"


def test_corruption_rearranges_a_truncated_document():
    ds = CharCorruptionDataset(DOC, 128)
    for _ in range(500):
        prefix, masked, suffix, _ = parse_example(ds, *ds[0])
        truncated = prefix + masked + suffix
        assert DOC.startswith(truncated)
        assert 4 <= len(truncated) <= int(128 * 7 / 8)
        assert len(masked) >= 1


def test_corruption_statistics_match_the_handout():
    ds = CharCorruptionDataset(DOC, 128)
    lengths, ratios, masked_lengths, prefixes = [], [], [], []
    for _ in range(20000):
        prefix, masked, suffix, _ = parse_example(ds, *ds[0])
        n = len(prefix) + len(masked) + len(suffix)
        lengths.append(n)
        masked_lengths.append(len(masked))
        ratios.append(len(masked) / n)
        prefixes.append(len(prefix))
    assert set(lengths) == set(range(4, int(128 * 7 / 8) + 1)), "every truncation length must be possible"
    assert abs(sum(masked_lengths) / sum(lengths) - 0.25) < 0.02, "the masked span is 1/4 of the document on average"
    assert abs(statistics.mean(ratios) - 0.25) < 0.03
    assert statistics.pstdev(ratios) > 0.05, "the masked length is random"
    assert min(ratios) < 0.1 and max(ratios) > 0.4, "sometimes shorter, sometimes longer than a quarter"
    assert min(prefixes) == 0 and max(prefixes) > 50, "the span can start anywhere"


@pytest.mark.parametrize("block_size", [128, 32])
def test_shifted_examples_are_the_course_examples_after_leading_pads(block_size):
    """
    max_shift puts 0..max_shift pads (each possible) before the course's example, keeping
    every target; the example's first character becomes a target too (after a pad).
    """
    longest = block_size - 2 - int(block_size * 7 / 8)
    course, shifted = CharCorruptionDataset(DOC, block_size), CharCorruptionDataset(DOC, block_size, max_shift=longest)
    shifts = []
    for draw in range(1000):
        random.seed(draw)
        x, y = course[0]
        random.seed(draw)
        x_shifted, y_shifted = shifted[0]
        k = len(decode(shifted, x_shifted)) - len(decode(shifted, x_shifted).lstrip(PAD_CHAR))
        assert torch.equal(x_shifted[k:], x[: len(x) - k]) and torch.equal(y_shifted[k:], y[: len(y) - k])
        assert torch.equal(y_shifted[: max(k - 1, 0)], torch.zeros(max(k - 1, 0), dtype=torch.long))
        assert (y_shifted != 0).sum() == (y != 0).sum() + (k > 0), "no target is cut off; the first is new"
        shifts.append(k)
    assert set(shifts) == set(range(longest + 1))
    order = torch.zeros(1000, dtype=torch.long)
    x_all, y_all = course.corrupt_all(order, torch.Generator().manual_seed(0))
    xs_all, ys_all = shifted.corrupt_all(order, torch.Generator().manual_seed(0))
    shifts = []
    for x, y, x_shifted, y_shifted in zip(x_all, y_all, xs_all, ys_all):
        k = int((x_shifted != 0).nonzero()[0])
        assert torch.equal(x_shifted[k:], x[: len(x) - k]) and torch.equal(y_shifted[k:], y[: len(y) - k])
        assert (y_shifted != 0).sum() == (y != 0).sum() + (k > 0)
        shifts.append(k)
    assert set(shifts) == set(range(longest + 1))


def test_shift_beyond_the_free_pads_is_rejected():
    with pytest.raises(ValueError, match="max_shift must be in 0..14 at block size 128, got 15"):
        CharCorruptionDataset(DOC, 128, max_shift=15)


def test_short_documents_empty_lines_and_trailing_newline():
    ds = CharCorruptionDataset("ab\n\nabcdefgh ijk\n\n\nxyz\n", 16)
    assert len(ds) == 3
    for idx in range(len(ds)):
        for _ in range(50):
            prefix, masked, suffix, _ = parse_example(ds, *ds[idx])
            assert ds.data[idx].startswith(prefix + masked + suffix)


def test_block_size_too_small_is_rejected():
    with pytest.raises(ValueError, match="block_size"):
        CharCorruptionDataset("hello", 4)


def test_name_dataset_layout():
    pre = CharCorruptionDataset("Where was Bob born? Paris\n", 32)
    ds = NameDataset(pre, "Where was Bob born?\tParis\n")
    x, y = ds[0]
    question = "Where was Bob born?"
    full = question + MASK_CHAR + "Paris" + MASK_CHAR
    full += PAD_CHAR * (32 - len(full))
    assert decode(ds, x) == full[:-1]
    assert decode(ds, y) == PAD_CHAR * (len(question) - 1) + full[len(question) :]
    assert x.dtype == y.dtype == torch.long
    assert ds.stoi is pre.stoi and ds.itos is pre.itos and ds.block_size == 32


@pytest.mark.parametrize("ending", ["", "\n", "\r\n", "\n\n"])
def test_name_dataset_one_example_per_nonempty_line(ending):
    text = "Where was A born?\tX\n\nWhere was B born?\tY" + ending
    pre = CharCorruptionDataset(text, 32)
    ds = NameDataset(pre, text)
    assert len(ds) == 2
    assert decode(ds, ds[1][0]).startswith("Where was B born?" + MASK_CHAR + "Y" + MASK_CHAR)


def test_name_dataset_keeps_non_ascii_letters():
    text = "Where was Naïma Håvard born?\tSão Paulo\n"
    ds = NameDataset(CharCorruptionDataset(text, 64), text)
    assert decode(ds, ds[0][0]).startswith("Where was Naïma Håvard born?" + MASK_CHAR + "São Paulo" + MASK_CHAR)
    assert ds.dropped_characters == 0


def test_name_dataset_drops_characters_outside_the_vocabulary():
    pre = CharCorruptionDataset("Where was Bob born? Paris", 64)
    ds = NameDataset(pre, "Where was Bob! born?\tParis~\n")
    assert ds.dropped_characters == 2
    assert decode(ds, ds[0][0]).startswith("Where was Bob born?" + MASK_CHAR + "Paris" + MASK_CHAR)


def test_name_dataset_names_a_malformed_line():
    pre = CharCorruptionDataset("Where was A born? X\t", 32)
    with pytest.raises(ValueError, match="line 3"):
        NameDataset(pre, "Where was A born?\tX\n\nWhere was A born? X\n")


def test_assignment_data(a5_dir):
    wiki = (a5_dir / "wiki.txt").read_text(encoding="utf-8")
    pre = CharCorruptionDataset(wiki, 128)
    assert len(pre) == 2937 and pre.vocab_size == 256
    train_text = (a5_dir / "birth_places_train.tsv").read_text(encoding="utf-8")
    ds = NameDataset(pre, train_text)
    assert len(ds) == 2000 and ds.dropped_characters == 0
    for idx, line in enumerate(train_text.splitlines()):
        question, place = line.split("\t")
        assert decode(ds, ds[idx][0]).startswith(question + MASK_CHAR + place + MASK_CHAR)


def corruption_draws(x, y):
    """(truncation lengths, masked lengths, starts), each (N,), read back from examples (N, block_size-1)."""
    text = torch.cat([x[:, :1], y], dim=1)
    positions = torch.arange(text.size(1))
    is_mask = text == 1
    n = (text != 0).sum(1) - 2
    start = torch.where(is_mask, positions, text.size(1)).min(1).values
    second_mask = torch.where(is_mask, positions, -1).max(1).values
    return n, n + 1 - second_mask, start


def exact_draw_probabilities(document_lengths, max_truncation):
    """The probabilities of every truncation length, masked length and start, for documents drawn uniformly."""
    marginals = [torch.zeros(max_truncation + 1, dtype=torch.float64) for _ in range(3)]
    for length in document_lengths:
        truncations = range(4, max_truncation + 1)
        for truncation in truncations:
            n = min(truncation, length)
            masked_choices = range(1, max(1, n // 2 - 1) + 1)
            for masked in masked_choices:
                starts = range(0, n - masked + 1)
                p = 1 / (len(document_lengths) * len(truncations) * len(masked_choices) * len(starts))
                marginals[0][n] += p * len(starts)
                marginals[1][masked] += p * len(starts)
                marginals[2][list(starts)] += p
    return marginals


def chi_square(counts, probabilities):
    """Pearson's statistic of observed counts against probabilities, and its degrees of freedom."""
    expected = probabilities * counts.sum()
    cells = expected > 0
    assert counts[~cells].sum() == 0, "a value that cannot be drawn was drawn"
    return float(((counts[cells] - expected[cells]) ** 2 / expected[cells]).sum()), int(cells.sum()) - 1


def test_corruption_drawn_for_a_whole_epoch_has_the_per_example_distribution():
    """
    corrupt_all (tensor operations, a whole epoch at once) and __getitem__ (the course's
    per-example draws) each match the exact distribution of the truncation length, the
    masked length and the start, over documents shorter than 4, shorter than the
    truncation limit and longer than it; and every tensor-drawn row is a corruption of its document.
    """
    documents = ["abc", "defghijklm", "nopqrstuvwxyzabcdefg", DOC[:40]]
    ds = CharCorruptionDataset("\n".join(documents), 32)
    repeats = 6000
    order = torch.arange(len(documents)).repeat(repeats)
    x_all, y_all = ds.corrupt_all(order, torch.Generator().manual_seed(0))
    random.seed(0)
    per_example = [ds[int(i)] for i in order]
    x_one, y_one = torch.stack([x for x, _ in per_example]), torch.stack([y for _, y in per_example])
    exact = exact_draw_probabilities([len(d) for d in documents], ds.max_truncation)
    for name, (x, y) in {"corrupt_all": (x_all, y_all), "__getitem__": (x_one, y_one)}.items():
        assert x.shape == y.shape == (len(order), ds.block_size - 1)
        for what, draws, probabilities in zip(("truncation", "masked length", "start"), corruption_draws(x, y), exact):
            counts = torch.bincount(draws, minlength=len(probabilities)).double()
            statistic, freedom = chi_square(counts, probabilities)
            # a correct sampler exceeds this with probability below 1e-6
            assert statistic < freedom + 7 * (2 * freedom) ** 0.5, f"{name}: {what} chi-square {statistic:.0f}"
    for row in range(0, len(order), 97):
        prefix, masked, suffix, _ = parse_example(ds, x_all[row], y_all[row])
        assert documents[order[row]].startswith(prefix + masked + suffix)
