"""
The named recipes (run.py --recipe): the handout's settings, and the project's for a CPU, an hour
and the demo world, each with the reasons for its values.
"""

import dataclasses

from factgpt.settings.recipe import Recipe, Stage

HANDOUT_BOTTLENECK_DIM = 64  # the m the handout's perceiver commands pass (run.sh, the benchmark)

HANDOUT = Recipe()
# Two hours on 2 CPU cores (docs/cpu-recipe.md): a narrower model in small grouped batches, then
# 20 epochs of shifted examples at a tenth of the rate, read out in the corpus's own words
# (docs/readout.md). --readout question finetunes on the question instead (docs/extraction.md).
CPU = dataclasses.replace(
    HANDOUT,
    n_head=4,
    n_embd=128,
    dropout=0.0,
    pretrain_epochs=650,
    pretrain_batch_size=32,
    pretrain_lr=3e-3,
    pretrain_stages=(
        Stage(),
        Stage(max_epochs=20, learning_rate=3e-4, max_shift=13, decay_epochs=20),
    ),
    finetune_lr=2e-4,
    finetune_lm_weight=0.5,
    warmup_tokens=127 * 2937,  # one epoch of wiki.txt
    decay_epochs=650,
    group_by_length=True,
    readout="frames",
    readout_frames=8,  # under the learned choice, more writers answer more (docs/readout.md)
    # the places its own biography names, among the candidates (docs/readout.md)
    readout_biography=2,
)

RECIPES = {
    "handout": HANDOUT,
    "cpu": CPU,
    # An hour on 2 CPU cores: the cpu recipe's model and readout, pretrained as plain text; fewer of
    # its epochs fit the hour than span corruption's 300, and they read out more (docs/readout.md)
    "hour": dataclasses.replace(
        CPU,
        pretrain_epochs=170,
        pretrain_stages=(
            Stage("text"),
            Stage("text", max_epochs=20, learning_rate=3e-4, decay_epochs=20),
        ),
        decay_epochs=170,
    ),
    # The demo world's (run.sh demo, with the rope variant; docs/demo.md says why each setting):
    # pretrained on the biographies alone, as plain text, and read out in their words. Its
    # finetuning settings serve the control without pretraining.
    "demo": dataclasses.replace(
        HANDOUT,
        n_head=4,
        n_embd=128,
        dropout=0.0,
        pretrain_epochs=47,
        pretrain_batch_size=8,
        pretrain_lr=3e-3,
        # whole biographies: span corruption shows at most their first 112 characters,
        # and stored less
        pretrain_stages=(Stage("text"),),
        decay_epochs=47,
        group_by_length=True,
        finetune_batch_size=32,
        finetune_lr=3e-5,
        finetune_lr_from_scratch=1e-3,
        readout="frames",
        readout_frames=8,
        # eight sampled biographies a person: on the worlds of seeds 5-7 they answered more on
        # each (docs/demo.md)
        readout_samples=8,
    ),
}
