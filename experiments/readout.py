"""
The frames readout (src/factgpt/readout/: frames.py, ensemble.py, fitting.py), studied on the training people:
the frames mined from the first 1,600 people of birth_places_train.tsv and their zero-shot accuracy there, then
ensembles of the best of them, fitted on those 1,600 and checked on the last 400.

    python experiments/readout.py vanilla wiki.txt --reading_params_path pretrain.params \\
        [--finetune_corpus_path birth_places_train.tsv] [--sizes 1 2 3 5 8] [--eval_corpus_path birth_dev.tsv] \\
        [--first_chars 1 2 3 5]

--eval_corpus_path scores, once, the ensemble of the size best on the last 400, fitted on all
the training people (what `run.py evaluate --readout frames --readout_frames N` does), beside
the controls: the handout's question on the same params, the most frequent training place,
and the people whose biography does not name their birthplace. --sizes N alone skips the
choice.

--first_chars K [K ...] adds, for the ensemble of the first size, candidates beyond the greedy
path: where each writer's greedy continuation starts its place, its K-1 next likeliest
characters, each continued greedily; all scored as the ensemble scores its candidates. It
prints, on the last 400, the accuracy and the share of people whose place is among the
candidates, for each K (1: the greedy path alone).
"""

import collections
import time

import src_path  # noqa: F401

# isort: split
import torch

from dataset import encoded, padded_ids
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.common.questions import biographies, name_of
from factgpt.corpus.reading import answered_pairs
from factgpt.readout import frames
from factgpt.readout.decoding import greedy_completions, predict_places
from factgpt.readout.ensemble import PLACE_STEPS, Ensemble, accuracy, candidate_set, scored_candidates, written_places
from factgpt.readout.fitting import fitted_ensemble
from factgpt.readout.frames import names_in
from factgpt.settings.command_line import params_parser, reading_config
from utils import eval_mode


def tuning_split(pairs):
    """(the first 1,600 training pairs, the last 400): what a readout is fitted on, and checked on."""
    return pairs[:1600], pairs[-400:]


def answers_of(candidates, size):
    """The summed choice's answers of the ensemble's first `size` writers, from its Candidates."""
    return [person.of_writers(range(size)).summed()[0] for person in candidates]


@torch.no_grad()
def likeliest_next(model, corpus, prompts, k, device, batch_size=256):
    """[the k likeliest next characters after each prompt], likeliest first."""
    with eval_mode(model):
        chars = []
        for start in range(0, len(prompts), batch_size):
            rows = [encoded(text, corpus.stoi) for text in prompts[start : start + batch_size]]
            logits, _ = model(padded_ids(rows).to(device))
            last = logits[torch.arange(len(rows)), torch.tensor([len(ids) - 1 for ids in rows])]
            chars += [[corpus.itos[i] for i in top] for top in last.topk(k, dim=-1).indices.tolist()]
    return chars


def branched_places(model, corpus, ensemble, names, k, device):
    """
    [[[places] per writer] per name]: each writer's greedy place first, then the places of the
    k-1 likeliest other characters where its greedy continuation starts the place (at its
    first written character where it names none), each continued greedily to PLACE_STEPS
    characters in all.
    """
    prompts = [frames.prompt(frame, name) for name in names for frame in ensemble.writers]
    written = greedy_completions(model, prompts, corpus, device, PLACE_STEPS)
    starts = []
    for text in written:
        place = frames.place_in(text, ensemble.skips)
        starts.append(text.find(place) if place else len(text) - len(text.lstrip(" ")))
    heads = [prompt + text[:at] for prompt, text, at in zip(prompts, written, starts)]
    likeliest = likeliest_next(model, corpus, heads, k, device)
    others = [
        [c for c in chars if c != text[at : at + 1]][: k - 1] for chars, text, at in zip(likeliest, written, starts)
    ]
    branches = [head + char for head, chars in zip(heads, others) for char in chars]
    continued = iter(greedy_completions(model, branches, corpus, device, PLACE_STEPS))
    per_prompt = []
    for text, at, chars in zip(written, starts, others):
        places = [frames.place_in(text, ensemble.skips)]
        for char in chars:
            branch = text[:at] + char + next(continued)[: max(0, PLACE_STEPS - at - 1)]
            places.append(frames.place_in(branch, ensemble.skips))
        per_prompt.append(places)
    size = len(ensemble.writers)
    return [per_prompt[i * size : (i + 1) * size] for i in range(len(names))]


def branched_candidates(model, corpus, ensemble, names, branched, device):
    """
    Each name's Candidates among all its branched places (branched_places); a place counts
    as written by a writer only where that writer's greedy path wrote it.
    """
    written = [[places[0] for places in row] for row in branched]
    options = [candidate_set([place for places in row for place in places]) for row in branched]
    return scored_candidates(model, corpus, names, written, ensemble.scorers, ensemble.end, device, options)


def first_chars_table(model, corpus, ensemble, pairs, ks, device):
    """The ensemble on `pairs` with candidates from the K likeliest characters at the place's start, for each K."""
    names = names_in(pairs)
    print("\n| likeliest first characters | candidates a person | place among them | last 400 | CPU time |")
    print("| --- | --- | --- | --- | --- |")
    for k in ks:
        started = time.process_time()
        branched = branched_places(model, corpus, ensemble, names, k, device)
        candidates = branched_candidates(model, corpus, ensemble, names, branched, device)
        options = [person.places for person in candidates]
        answers = [person.summed()[0] for person in candidates]
        reach = sum(place in opts for opts, (_, place) in zip(options, pairs)) / len(pairs)
        mean = sum(map(len, options)) / len(options)
        seconds = time.process_time() - started
        right = accuracy(answers, pairs)
        print(f"| {k} | {mean:.1f} | {reach:.1%} | {right:.1%} | {seconds:.0f} s |", flush=True)


def controls(model, corpus, training, held_out, size, device):
    """
    The ensemble of `size` writers fitted on all the training people, scored once on the
    held-out pairs, beside the handout's question on the same params and the most frequent
    training place; split by whether the person's biography names the place.
    """
    fitted = fitted_ensemble(model, corpus, training, size, device)
    readout = [answer.text for answer in fitted.answers(model, corpus, names_in(held_out), device)]
    asked = predict_places(model, [question for question, _ in held_out], corpus, device)
    commonest = collections.Counter(place for _, place in training).most_common(1)[0][0]
    columns = {f"frames readout ({size} writing)": readout, "the handout question": asked}
    print()
    print_split(corpus, held_out, columns | {f"{commonest} for all": [commonest] * len(held_out)})


def print_split(corpus, held_out, columns):
    """
    A table of how many held-out (question, place) pairs each column of answers ({label:
    [answer per pair]}) gets right: of all, of those whose biography in the corpus names
    the place, and of the others.
    """
    bios = biographies(corpus.data, names_in(held_out))
    named = [place in bios.get(name_of(question), "") for question, place in held_out]
    groups = [("all", [True] * len(held_out)), ("biography names the place", named)]
    groups.append(("biography does not name it", [not n for n in named]))
    print(f"| held-out people | {' | '.join(columns)} |\n|{' --- |' * (len(columns) + 1)}")
    for label, members in groups:
        chosen = [i for i, member in enumerate(members) if member]
        cells = []
        for answers in columns.values():
            right = sum(answers[i] == held_out[i][1] for i in chosen)
            cells.append(f"{right} ({right / max(1, len(chosen)):.1%})")
        print(f"| {label} ({len(chosen)}) | {' | '.join(cells)} |")


def main(argv=None):
    parser = params_parser(__doc__, "the pretrained params to read", prog="readout.py")
    parser.add_argument("--finetune_corpus_path", default="birth_places_train.tsv", help="the training pairs")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 3, 5, 8], help="how many frames write")
    parser.add_argument("--eval_corpus_path", help="score the chosen ensemble on these pairs, once")
    parser.add_argument(
        "--first_chars", type=int, nargs="+", help="candidates from the K likeliest characters at the place's start"
    )
    args = parser.parse_args(argv)
    cfg = reading_config(args, finetune_corpus_path=args.finetune_corpus_path)

    def run():
        setup, device = pipeline.load(cfg)
        model, corpus = setup.model, setup.corpus
        pairs = answered_pairs(cfg.finetune_corpus_path)
        fitting, checking = tuning_split(pairs)
        started = time.process_time()
        mined = frames.mine(corpus.data, fitting, frames.least_people(fitting))
        mined_frames = [frame for frame, _ in mined.frames]
        written = written_places(model, corpus, names_in(fitting), mined_frames, mined.skips, device)
        print(f"date words: {' '.join(sorted(mined.skips))}\n")
        print(f"| frame | people (of {len(fitting)}) | scores | zero-shot, first 1,600 |\n| --- | --- | --- | --- |")
        alone = [accuracy([row[i] for row in written], fitting) for i in range(len(mined.frames))]
        for i in sorted(range(len(alone)), key=lambda i: -alone[i]):
            frame, people = mined.frames[i]
            print(f"| `{frame}` | {people} | {'yes' if frame in mined.scorers else ''} | {alone[i]:.1%} |")
        print("\n| frames writing | chosen (in order) | first 1,600 | last 400 |\n| --- | --- | --- | --- |")
        results, largest = [], fitted_ensemble(model, corpus, fitting, max(args.sizes), device)
        split = {"first 1,600": fitting, "last 400": checking}
        tables = {label: largest.candidates(model, corpus, names_in(pairs), device) for label, pairs in split.items()}
        for size in args.sizes:  # the writers are chosen one at a time: each size's are the first of the largest's
            figures = [accuracy(answers_of(tables[label], size), pairs) for label, pairs in split.items()]
            writers = ", ".join(f"`{frame}`" for frame in largest.writers[:size])
            print(f"| {size} | {writers} | {figures[0]:.1%} | {figures[1]:.1%} |", flush=True)
            results.append((figures[1], size))
        print(f"\nCPU time: {time.process_time() - started:.0f} s")
        if args.first_chars:
            first = Ensemble(largest.writers[: args.sizes[0]], largest.scorers, largest.skips)
            first_chars_table(model, corpus, first, checking, args.first_chars, device)
        if args.eval_corpus_path:
            controls(model, corpus, pairs, answered_pairs(args.eval_corpus_path), max(results)[1], device)

    return exit_status("readout.py", run)


if __name__ == "__main__":
    exit_process(main())
