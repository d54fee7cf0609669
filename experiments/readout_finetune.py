"""
Does any finetuning add to the frames readout (src/factgpt/readout/: frames.py, ensemble.py, fitting.py)? Each
run finetunes the pretrained params on the first 1,600 people of birth_places_train.tsv, then the ensemble
(its writers, and with --choice learned its weights) fitted zero-shot on those people,
before any finetuning (finetuning on them would make them a poor judge of it), is scored on
the last 400, beside the handout's question.

    python experiments/readout_finetune.py vanilla wiki.txt --reading_params_path pretrain.params \\
        [--finetune_corpus_path birth_places_train.tsv] [--runs zero-shot question lora ...] [--rehearsal_rows PATH]

The runs (RUNS): the `cpu` recipe's finetuning on the question (lr 2e-4, GPT-1's auxiliary
loss λ 0.5), at a tenth of its rate, and on the people whose birthplace the params complete
from their biography only; low-rank adapters alone (rank 8, at the recipe's rate and at ten
times it); all but the MLPs and the embeddings (frozen); the question rehearsed, beside as
many span corruptions of the corpus (rehearsed); finetuning in the frames themselves (each
person asked in every frame that comes right before a place in the biographies, trained on
the place and the comma after it), at both rates; and learning only where a place ends
(the comma alone). --rehearsal_rows PATH writes the rehearsal's rows as the model reads them, a
line each (pads dropped): the questions, then a draw of the span-corrupted documents.
"""

import dataclasses
import os
import random
import tempfile
import time

import torch
from torch.utils.data import ConcatDataset, Subset

import src_path  # noqa: F401

# isort: split
from dataset import PAD_CHAR, NameDataset, encoded, known_characters
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.common.questions import name_of
from factgpt.corpus.reading import answered_pairs
from factgpt.readout import frames
from factgpt.readout.decoding import predict_places
from factgpt.readout.ensemble import accuracy
from factgpt.readout.fitting import fitted_ensemble
from factgpt.settings.command_line import params_parser, reading_config
from factgpt.settings.recipe import Recipe
from factgpt.settings.recipes import RECIPES
from factgpt.settings.run_config import RunConfig
from readout import tuning_split

# run name: (form of the finetuning examples, recipe settings); form None: no finetuning
RUNS = {
    "zero-shot": (None, {}),
    "question": ("question", {}),
    "question, lr 2e-5": ("question", dict(finetune_lr=2e-5)),
    "question, people the params recall": ("question", dict(finetune_people="biography")),
    "lora": ("question", dict(finetune_lora_rank=8)),
    "lora, lr 2e-3": ("question", dict(finetune_lora_rank=8, finetune_lr=2e-3)),
    "all but the MLPs and embeddings": ("question", dict(finetune_frozen="mlp,tok_emb,pos_emb")),
    "rehearsal": ("rehearsal", {}),
    "frames": ("frames", {}),
    "frames, lr 2e-5": ("frames", dict(finetune_lr=2e-5)),
    "place ends": ("ends", {}),
}


class FramedPairs(torch.utils.data.Dataset):
    """
    Each (question, place) pair's person asked in each frame, as (x, y) rows of block_size - 1:
    x = the frame's prompt, the place, `end`, pads; y trains the place and `end` after the
    prompt ("frames") or `end` alone ("ends"), the pad elsewhere.
    """

    def __init__(self, corpus, pairs, scorers, end, form):
        self.stoi, self.block_size = corpus.stoi, corpus.block_size
        self.rows = []
        for question, place in pairs:
            for frame in scorers:
                asked = frames.prompt(frame, name_of(question))
                answer = known_characters(place + end, corpus.stoi)[0]
                if len(asked) + len(answer) > self.block_size:
                    continue
                if form == "ends":  # the place becomes part of the prompt
                    asked, answer = asked + answer[: -len(end)], answer[-len(end) :]
                self.rows.append((asked, answer))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, idx):
        asked, trained = self.rows[idx]
        text = (asked + trained).ljust(self.block_size, PAD_CHAR)
        target = PAD_CHAR * (len(asked) - 1) + text[len(asked) :]
        return tuple(torch.tensor(encoded(row, self.stoi), dtype=torch.long) for row in (text[:-1], target))


def rehearsed(corpus, pairs):
    """
    The question's examples of `pairs` mixed with as many of the corpus's documents (drawn
    once), span-corrupted afresh each epoch as pretraining's first stage does. As many rows,
    not as much loss: the step's loss is the mean over its targets, and a corruption row has
    several times a question's, so most of the step's gradient is the corpus's.
    """
    questions = NameDataset(corpus, "".join(f"{question}\t{place}\n" for question, place in pairs))
    documents = random.Random(0).sample(range(len(corpus)), min(len(pairs), len(corpus)))
    return ConcatDataset([questions, Subset(corpus, documents)])


def write_rows(dataset, corpus, path):
    """The dataset's x rows as text, a line each without their pads; Python's random left as it was."""
    state = random.getstate()  # the rows' corruptions are drawn apart from those the finetuning trains on
    rows = ["".join(corpus.itos[i] for i in dataset[i][0].tolist()).rstrip(PAD_CHAR) for i in range(len(dataset))]
    random.setstate(state)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(row + "\n" for row in rows)


def finetuned(cfg, form, settings, fitting_path, ensemble, folder, rows_path=None):
    """The model finetuned as the run says (form None: the pretrained one), on the run's device; a rehearsal's
    rows written to rows_path where given."""
    path = cfg.reading_params_path
    if form is not None:
        path = os.path.join(folder, "finetuned.params")
        run = RunConfig(
            "finetune", cfg.variant, cfg.pretrain_corpus_path, reading_params_path=cfg.reading_params_path,
            writing_params_path=path, finetune_corpus_path=fitting_path, device=cfg.device,
            recipe=dataclasses.replace(RECIPES["cpu"], **settings), recipe_name="cpu",
        )  # fmt: skip

        def examples(corpus, pairs):
            if form == "rehearsal":
                mixed = rehearsed(corpus, pairs)
                if rows_path:
                    write_rows(mixed, corpus, rows_path)
                return mixed
            return FramedPairs(corpus, pairs, ensemble.scorers, ensemble.end, form)

        pipeline.finetune(run, examples=None if form == "question" else examples)
    return pipeline.load(dataclasses.replace(cfg, reading_params_path=path))[0].model


def main(argv=None):
    parser = params_parser(__doc__, "the pretrained params to finetune", prog="readout_finetune.py")
    parser.add_argument("--finetune_corpus_path", default="birth_places_train.tsv", help="the training pairs")
    parser.add_argument(
        "--runs", nargs="+", choices=list(RUNS), default=list(RUNS), metavar="RUN", help=str(list(RUNS))
    )
    parser.add_argument("--writers", type=int, default=RECIPES["cpu"].readout_frames, help="how many frames write")
    choices = {field.name: field for field in dataclasses.fields(Recipe)}["readout_choice"].metadata["choices"]
    parser.add_argument("--choice", choices=choices, default=RECIPES["cpu"].readout_choice, help="the readout's choice")
    parser.add_argument("--rehearsal_rows", metavar="PATH", help="write the rehearsal run's rows to PATH, a line each")
    args = parser.parse_args(argv)
    cfg = reading_config(args, finetune_corpus_path=args.finetune_corpus_path)

    def run():
        setup, device = pipeline.load(cfg)
        corpus, pairs = setup.corpus, answered_pairs(cfg.finetune_corpus_path)
        fitting, checking = tuning_split(pairs)
        learned = args.choice == "learned"
        ensemble = fitted_ensemble(setup.model, corpus, fitting, args.writers, device, learned=learned)
        print(f"writers: {', '.join(ensemble.writers)}\nscorers: {', '.join(ensemble.scorers)}")
        print(f"choice: {args.choice}\n")
        print("| run | frames readout, last 400 | the handout question, last 400 | CPU s |\n| --- | --- | --- | --- |")
        names = frames.names_in(checking)
        questions = [known_characters(question, corpus.stoi)[0] for question, _ in checking]  # as finetuning reads them
        with tempfile.TemporaryDirectory() as folder:
            fitting_path = os.path.join(folder, "train1600.tsv")
            with open(fitting_path, "w", encoding="utf-8") as f:
                f.writelines(f"{question}\t{place}\n" for question, place in fitting)
            for name in args.runs:
                started = time.process_time()
                model = finetuned(cfg, *RUNS[name], fitting_path, ensemble, folder, args.rehearsal_rows)
                read = [answer.text for answer in ensemble.answers(model, corpus, names, device)]
                asked = predict_places(model, questions, corpus, device)
                cells = [f"{accuracy(answers, checking):.1%}" for answers in (read, asked)]
                print(f"| {name} | {' | '.join(cells)} | {time.process_time() - started:.0f} |", flush=True)

    return exit_status("readout_finetune.py", run)


if __name__ == "__main__":
    exit_process(main())
