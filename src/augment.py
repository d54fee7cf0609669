"""
Other views of the pretraining biographies, made from their own text alone (Recipe's
full_names, which a pretraining stage may also set for itself, and clause_dropout): the
levers that try to key a stored birthplace to the person's name, which is all a question
gives. Each corpus line is "NAME. biography".

- full_names: the biography names its person in full where it names them by surname
  alone, or by He or She starting a sentence (after Allen-Zhu and Li's "fullname"
  augmentation), e.g. "Stanley Corrsin. Corrsin was born ..." -> "... Stanley Corrsin was
  born ...". A surname after another name ("Joshua Toulmin Smith", a relative) or a particle
  of the name ("van Bredael") stays, and so do the pronouns inside a sentence, which may be
  someone else's.
- clause_dropout: every example of a biography leaves each of its clauses (the text
  between commas and full stops) out with this probability, drawn anew each time, so
  each epoch sees another sub-sampled view; the name (the title) always stays.
"""

import random
import re

from torch.utils.data import Dataset

CLAUSE_END = re.compile(r"(?<=[,.;]) ")


def split_title(document):
    """(the person's name, the biography after it) of a corpus line "NAME. biography"."""
    title, _, body = document.partition(". ")
    return title, body


def full_named(document):
    """The document with its person named in full for every lone surname and sentence-starting He/She."""
    title, body = split_title(document)
    name = title.split()
    if not body or len(name) < 2 or "%" in title or "," in title:  # one word, spelt otherwise, or titled
        return document

    def named(match):  # a lone surname: first, after punctuation, or after a lowercase word not of the name
        before = body[: match.start()].split()[-1:]
        lone = not before or before[0][-1] in ",.;:()" or (before[0].islower() and before[0] not in name)
        return title if lone else match.group()

    body = re.sub(rf"\b{re.escape(name[-1])}\b", named, body)
    body = re.sub(r"(^|(?<= \. ))(He|She)\b", title, body)
    return f"{title}. {body}"


def clause_view(document, dropout, rng=random):
    """The title and each clause of the biography kept with probability 1 - dropout (one at least)."""
    title, body = split_title(document)
    clauses = CLAUSE_END.split(body) if body else []
    kept = [clause for clause in clauses if rng.random() >= dropout]
    if clauses and not kept:
        kept = [rng.choice(clauses)]
    return " ".join([f"{title}.", *kept]) if kept else document


class ClauseViews(Dataset):
    """The corpus's span-corruption examples (x, y), each of a fresh clause_view of its document."""

    def __init__(self, corpus, dropout):
        self.corpus, self.dropout = corpus, dropout

    def __len__(self):
        return len(self.corpus)

    def __getitem__(self, idx):
        return self.corpus.corrupted(clause_view(self.corpus.data[idx], self.dropout))


def viewed(corpus, full_names, clause_dropout):
    """The pretraining corpus as these views of it (itself when they ask for none)."""
    if full_names:
        corpus = corpus.with_documents([full_named(document) for document in corpus.data], corpus.max_shift)
    if clause_dropout:
        corpus = ClauseViews(corpus, clause_dropout)
    return corpus
