"""
The learning rate's schedule as the course's trainer has it: a warmup, then a cosine, by the tokens
seen.
"""

import math

LR_FLOOR = 0.1  # the cosine never takes the rate below 10% of its peak


def lr_multiplier(tokens, warmup_tokens, final_tokens, clamped=False):
    """
    The learning-rate factor after `tokens` tokens: a linear warmup, then a cosine floored at
    LR_FLOOR. As in the course, the cosine rises again past final_tokens; clamped=True holds it at
    the floor.
    """
    if tokens < warmup_tokens:
        return tokens / max(1, warmup_tokens)
    progress = (tokens - warmup_tokens) / max(1, final_tokens - warmup_tokens)
    if clamped:
        progress = min(1.0, progress)
    return max(LR_FLOOR, 0.5 * (1.0 + math.cos(math.pi * progress)))


class TokenSchedule:
    """
    The schedule of a training on `examples` examples of `tokens_per_example` tokens under a
    TrainerConfig.
    """

    def __init__(self, config, examples, tokens_per_example):
        self.config, self.examples, self.tokens_per_example = config, examples, tokens_per_example

    def tokens_before(self, step):
        """
        Training tokens seen in the batches before batch `step` (0-based): the schedule's clock.
        """
        n, bs = self.examples, self.config.batch_size
        epochs, within = divmod(step, math.ceil(n / bs))
        return (epochs * n + min(within * bs, n)) * self.tokens_per_example

    def factor(self, step):
        """
        Batch `step`'s learning-rate factor (LambdaLR's lr_lambda). As in the course, it is set
        after each step from the tokens seen so far, so the first step runs at the peak.
        """
        c = self.config
        if not c.lr_decay or step == 0:
            return 1.0
        return lr_multiplier(
            self.tokens_before(step), c.warmup_tokens, c.final_tokens, c.lr_schedule == "clamped"
        )
