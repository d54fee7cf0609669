"""
Other views of the pretraining biographies, made from their own text alone (Recipe's full_names and
clause_dropout, a stage's "text" data): levers that try to key a stored birthplace to the person's
name, which is all a question gives. Each corpus line is "NAME. biography".
"""

import random
import re

from torch.utils.data import Dataset

from dataset import encoded, padded_ids

CLAUSE_END = re.compile(r"(?<=[,.;]) ")


def split_title(document):
    """Split a corpus line "NAME. biography" into the person's name and the biography."""
    title, _, body = document.partition(". ")
    return title, body


def full_named(document):
    """
    The document with its person named in full for each lone surname and each He or She starting a
    sentence (Allen-Zhu and Li's "fullname"). A surname after another name or a particle ("van
    Bredael") stays, and so do pronouns mid-sentence, which may be someone else's.
    """
    title, body = split_title(document)
    name = title.split()
    # one word, spelt otherwise, or titled
    if not body or len(name) < 2 or "%" in title or "," in title:
        return document

    # a lone surname: first, after punctuation, or after a lowercase word not of the name
    def named(match):
        before = body[: match.start()].split()[-1:]
        lone = (
            not before
            or before[0][-1] in ",.;:()"
            or (before[0].islower() and before[0] not in name)
        )
        return title if lone else match.group()

    body = re.sub(rf"\b{re.escape(name[-1])}\b", named, body)
    body = re.sub(r"(^|(?<= \. ))(He|She)\b", title, body)
    return f"{title}. {body}"


def clause_view(document, dropout, rng=random):
    """
    The title and each clause of the biography kept with probability 1 - dropout (one at least).
    """
    title, body = split_title(document)
    clauses = CLAUSE_END.split(body) if body else []
    kept = [clause for clause in clauses if rng.random() >= dropout]
    if clauses and not kept:
        kept = [rng.choice(clauses)]
    return " ".join([f"{title}.", *kept]) if kept else document


class PlainText(Dataset):
    """
    The corpus's documents for plain next-character prediction, x without its last character and y
    without its first, padded. The course's span corruption sees at most a document's first 7/8
    block, most often far less; this sees a whole document, or where it is longer than the block,
    its name and a window of the rest.
    """

    def __init__(self, corpus):
        self.corpus = corpus

    def __len__(self):
        return len(self.corpus)

    def __getitem__(self, idx):
        return self.example(self.corpus.data[idx])

    def example(self, document):
        """
        One example of `document`, at most block_size characters. A longer one keeps its "NAME. "
        and a window of the biography after it, from a start drawn with Python's random, so that the
        name is always there.
        """
        size = self.corpus.block_size
        title, body = split_title(document)
        head = f"{title}. "
        if len(document) > size and body and len(head) <= size // 2:
            start = random.randint(0, len(body) - (size - len(head)))
            document = head + body[start : start + size - len(head)]
        # the pad, id 0, ignored by the loss
        ids = padded_ids([encoded(document[:size], self.corpus.stoi)], size)[0]
        return ids[:-1], ids[1:]


class ClauseViews(Dataset):
    """
    The corpus's examples (span corruptions, or `example`'s), each of a fresh clause_view: every
    epoch sees another sub-sample.
    """

    def __init__(self, corpus, dropout, example=None):
        self.corpus, self.dropout = corpus, dropout
        self.example = example or corpus.corrupted

    def __len__(self):
        return len(self.corpus)

    def __getitem__(self, idx):
        return self.example(clause_view(self.corpus.data[idx], self.dropout))


def viewed(corpus, full_names, clause_dropout, plain_text=False):
    """
    The pretraining corpus as these views of it, as plain text (PlainText) or span-corrupted as the
    course's (itself, when they ask for nothing else).
    """
    if full_names:
        corpus = corpus.with_documents(
            [full_named(document) for document in corpus.data], corpus.max_shift
        )
    if plain_text:
        text = PlainText(corpus)
        return ClauseViews(corpus, clause_dropout, text.example) if clause_dropout else text
    return ClauseViews(corpus, clause_dropout) if clause_dropout else corpus
