"""
The question files, read without torch (london_baseline.py starts without it), the course's score
line, and the name each question asks about, with its biography. A question file has a question on
every line, or "question<TAB>place" on every line.
"""

import re


def numbered_lines(text):
    """The non-empty lines of a text with their line numbers, a trailing carriage return removed."""
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line[:-1] if line.endswith("\r") else line
        if line:
            yield lineno, line


def read_questions(text, answered=None):
    """
    The line number, question and place of every line of a question file, all "question<TAB>place"
    or all questions alone (places None); answered=True asks for places. ValueError names the first
    bad line.
    """
    rows, places_required = [], answered
    for lineno, line in numbered_lines(text):
        fields = line.split("\t")
        if len(fields) > 2 or (places_required and len(fields) != 2):
            raise ValueError(
                f"line {lineno}: expected 'question<TAB>place', got {len(fields)} field(s)"
            )
        if answered is not None and answered != (len(fields) == 2):
            raise ValueError(
                f"line {lineno}: expected 'question' on every line "
                "or 'question<TAB>place' on every line"
            )
        answered = len(fields) == 2
        rows.append((lineno, fields[0], fields[1] if answered else None))
    return rows


def read_question_file(path):
    """read_questions of the file at `path`; its ValueError names the file."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return read_questions(text)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def question_place_pairs(text):
    """read_questions of `text`, whose every line must have its place."""
    return read_questions(text, answered=True)


def score_line(total, correct, counted="Correct"):
    """
    The course's score line, the percentage rounded to two decimals (3.6%, not 3.5999999999999996%).
    """
    return f"{counted}: {correct} out of {total}: {round(correct / max(1, total) * 100, 2)}%"


QUESTION = re.compile(r"Where was (.+) born\?")  # the handout's question


def name_of(question):
    """The name in "Where was NAME born?"; ValueError for any other question."""
    match = QUESTION.fullmatch(question.strip())
    if not match:
        raise ValueError(f"{question!r} is not of the form 'Where was NAME born?'")
    return match.group(1)


def biographies(documents, names):
    """
    Each name's biography: the text after "NAME. " in the first corpus line that opens with it.
    """
    by_first_word = {}
    for document in documents:
        by_first_word.setdefault(document.split(" ")[0], []).append(document)
    found = {}
    for name in names:
        lines = (d for d in by_first_word.get(name.split(" ")[0], []) if d.startswith(name + ". "))
        body = next(lines, None)
        if body is not None:
            found[name] = body[len(name) + 2 :]
    return found
