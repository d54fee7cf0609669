"""
The two datasets of the assignment, over one character vocabulary: span corruption for pretraining
and question<TAB>place pairs for finetuning. Id 0 is the pad (the loss ignores it), id 1 the mask,
and ids 2.. are the sorted characters of the pretraining corpus.
"""

import copy
import functools
import random
import sys

import torch
from torch.utils.data import Dataset

from factgpt.common.questions import numbered_lines, question_place_pairs

PAD_CHAR = "\u25a1"
MASK_CHAR = "\u2047"


def known_characters(text, stoi):
    """
    The text without the pad, the mask and the characters the vocabulary lacks, and how many were
    dropped.
    """
    kept = "".join(c for c in text if c in stoi and c not in (PAD_CHAR, MASK_CHAR))
    return kept, len(text) - len(kept)


def encoded(text, stoi):
    """The ids of a text's characters under the vocabulary `stoi`."""
    return [stoi[c] for c in text]


def padded_ids(rows, length=None):
    """
    Rows of ids as one Long tensor of `length` columns (the longest row's by default), each
    padded at its end with 0. A causal model reads each row's text as if it were alone.
    """
    x = torch.zeros(len(rows), length or max(map(len, rows)), dtype=torch.long)
    for row, ids in enumerate(rows):
        x[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return x


def corpus_lines(text):
    """The non-empty lines of a text: the documents of a corpus."""
    return [line for _, line in numbered_lines(text)]


def longest_shift(block_size):
    """
    The most pads max_shift may put before an example: what a longest layout (7/8 of the block, two
    masks) leaves.
    """
    return block_size - 2 - int(block_size * 7 / 8)


class CharCorruptionDataset(Dataset):
    """
    Span-corruption examples from the lines of `data`: prefix MASK suffix MASK masked_content PADs,
    x without its last character and y without its first. max_shift > 0 (0 is the course's) puts a
    uniform 0..max_shift pads first, so that a name is not always at position 0: a question has it
    at position 10.
    """

    PAD_CHAR = PAD_CHAR
    MASK_CHAR = MASK_CHAR

    def __init__(self, data, block_size, max_shift=0):
        if int(block_size * 7 / 8) < 4:
            raise ValueError(f"block_size must be at least 5, got {block_size}")
        limit = longest_shift(block_size)
        if not 0 <= max_shift <= limit:
            raise ValueError(
                f"max_shift must be in 0..{limit} at block size {block_size}, got {max_shift}"
            )
        self.max_shift = max_shift
        data = data.replace("\r\n", "\n")  # CRLF files get the vocabulary of their LF twins
        chars = sorted(set(data))
        for reserved, name in ((MASK_CHAR, "mask"), (PAD_CHAR, "pad")):
            if reserved in chars:
                lineno = data.count("\n", 0, data.index(reserved)) + 1
                raise ValueError(
                    f"line {lineno} holds the {name} character U+{ord(reserved):04X}, "
                    "which the model reserves"
                )
        chars = [PAD_CHAR, MASK_CHAR] + chars
        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.itos = {i: ch for i, ch in enumerate(chars)}
        self.block_size = block_size
        self.vocab_size = len(chars)
        self.data = corpus_lines(data)

    def __len__(self):
        return len(self.data)

    def with_documents(self, documents, max_shift=0):
        """
        A dataset of other documents over this one's vocabulary, which must hold all their
        characters.
        """
        other = copy.copy(self)
        other.data, other.max_shift = list(documents), max_shift
        other.__dict__.pop("document_ids", None)  # the cached ids were this dataset's documents'
        return other

    @property
    def max_truncation(self):
        """The longest truncation a document can get: int(block_size * 7/8) characters."""
        return int(self.block_size * 7 / 8)

    @functools.cached_property
    def document_ids(self):
        """The ids of the documents' first max_truncation characters, padded, and their lengths."""
        kept = [document[: self.max_truncation] for document in self.data]
        ids = padded_ids([encoded(text, self.stoi) for text in kept], self.max_truncation)
        return ids, torch.tensor([len(text) for text in kept], dtype=torch.long)

    def corrupt_all(self, order, generator=None):
        """
        The examples x, y (N, block_size-1) of documents `order`, drawn at once with tensor
        operations: each row drawn as __getitem__ draws, but from `generator`, not Python's random,
        so the examples differ.
        """
        ids, lengths = self.document_ids
        ids, lengths = ids[order], lengths[order]
        rows = len(order)
        truncation = torch.randint(4, self.max_truncation + 1, (rows,), generator=generator)
        n = torch.minimum(truncation, lengths)
        masked_len = 1 + uniform_below((n // 2 - 1).clamp(min=1), generator)
        start = uniform_below(n - masked_len + 1, generator)
        # output position p holds: the prefix (p < start), MASK, the suffix, MASK,
        # the masked content, pads
        p = torch.arange(self.block_size).expand(rows, -1)
        if self.max_shift:
            p = p - torch.randint(0, self.max_shift + 1, (rows, 1), generator=generator)
        start, masked_len, n = start[:, None], masked_len[:, None], n[:, None]
        second_mask = n - masked_len + 1
        source = torch.where(
            p < start,
            p,
            torch.where(p <= second_mask, p - 1 + masked_len, p - second_mask - 1 + start),
        )
        text = ids.gather(1, source.clamp(0, self.max_truncation - 1))
        mask_id, pad_id = self.stoi[MASK_CHAR], self.stoi[PAD_CHAR]
        text = torch.where((p == start) | (p == second_mask), mask_id, text)
        text = torch.where((p >= n + 2) | (p < 0), pad_id, text)
        return text[:, :-1], text[:, 1:]

    def __getitem__(self, idx):
        return self.corrupted(self.data[idx])

    def corrupted(self, document):
        """One span corruption x, y of `document`, drawn with Python's random."""
        truncated = document[: random.randint(4, self.max_truncation)]
        n = len(truncated)
        masked_len = random.randint(1, max(1, n // 2 - 1))
        start = random.randint(0, n - masked_len)
        prefix = truncated[:start]
        masked_content = truncated[start : start + masked_len]
        suffix = truncated[start + masked_len :]
        masked_string = prefix + MASK_CHAR + suffix + MASK_CHAR + masked_content
        if self.max_shift:
            masked_string = PAD_CHAR * random.randint(0, self.max_shift) + masked_string
        masked_string += PAD_CHAR * (self.block_size - len(masked_string))
        ids = encoded(masked_string, self.stoi)
        return torch.tensor(ids[:-1], dtype=torch.long), torch.tensor(ids[1:], dtype=torch.long)


def uniform_below(high, generator=None):
    """A Long tensor of one integer drawn uniformly from [0, high[i]) for every i (high >= 1)."""
    draws = (torch.rand(high.shape, dtype=torch.float64, generator=generator) * high).long()
    return torch.minimum(draws, high - 1)


class NameDataset(Dataset):
    """
    Finetuning examples from lines "question<TAB>place": x is question MASK place MASK PADs, and y
    is x shifted by one with pads under the question. Characters the vocabulary lacks, the pad and
    the mask are dropped (counted in dropped_characters), as evaluation drops them.
    """

    def __init__(self, pretraining_dataset, data):
        self.PAD_CHAR = PAD_CHAR
        self.MASK_CHAR = MASK_CHAR
        self.itos = pretraining_dataset.itos
        self.stoi = pretraining_dataset.stoi
        self.block_size = pretraining_dataset.block_size
        self.data = []
        self.dropped_characters = 0
        for lineno, question, place in question_place_pairs(data):
            (question, q_dropped), (place, p_dropped) = (
                known_characters(f, self.stoi) for f in (question, place)
            )
            if len(question) + len(place) + 2 > self.block_size:
                raise ValueError(
                    f"line {lineno}: question and place are longer than the block size "
                    f"{self.block_size}"
                )
            self.data.append((question, place))
            self.dropped_characters += q_dropped + p_dropped

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        question, place = self.data[idx]
        text = question + MASK_CHAR + place + MASK_CHAR
        text += PAD_CHAR * (self.block_size - len(text))
        target = PAD_CHAR * (len(question) - 1) + text[len(question) :]
        x = torch.tensor(encoded(text[:-1], self.stoi), dtype=torch.long)
        y = torch.tensor(encoded(target, self.stoi), dtype=torch.long)
        return x, y


def main(argv=None):
    """python src/dataset.py {namedata,charcorruption}: print a few decoded examples."""
    import argparse

    from factgpt.common.files import resolve_data_path

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("dataset_type", choices=["namedata", "charcorruption"])
    parser.add_argument("--pretrain_corpus_path", default="wiki.txt")
    parser.add_argument("--finetune_corpus_path", default="birth_places_train.tsv")
    parser.add_argument("--examples", type=int, default=4)
    args = parser.parse_args(argv)

    path = resolve_data_path(args.pretrain_corpus_path)
    try:
        with open(path, encoding="utf-8") as f:
            corruption_dataset = CharCorruptionDataset(f.read(), 128)
        if args.dataset_type == "namedata":
            path = resolve_data_path(args.finetune_corpus_path)
            with open(path, encoding="utf-8") as f:
                dataset = NameDataset(corruption_dataset, f.read())
        else:
            dataset = corruption_dataset
    except (OSError, UnicodeDecodeError, ValueError) as e:
        print(f"dataset.py: error: {path}: {e}", file=sys.stderr)
        return 2
    for _, example in zip(range(args.examples), dataset):
        x, y = example
        print("x:", "".join(dataset.itos[int(i)] for i in x))
        print("y:", "".join(dataset.itos[int(i)] for i in y))
    return 0


if __name__ == "__main__":
    sys.exit(main())
