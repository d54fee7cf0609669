"""
The frames readout's learned choice among a person's candidate places.

Each candidate is scored by a linear function of its features: its log-probability after each
scorer frame, which writers wrote it, its length and, with samples, how many of them named it.
The weights are fitted, as a softmax over each training person's candidates, to pick the
person's place.
"""

import torch

# a log-probability that cannot be computed (the text beyond the block) counts as this
FLOOR = -100.0
L2 = 0.01  # the penalty on the squared standardised weights
LBFGS_STEPS = 500  # the most iterations of the fit


def features(scores, written, places, counts=None):
    """
    A float64 row per candidate place: its log-probability after each scorer frame (floored at
    FLOOR), whether each writer wrote it, its length and, where `counts` are given, its count.
    """
    rows = [
        [*score, *(float(w == place) for w in written), float(len(place))]
        + ([float(counts[k])] if counts is not None else [])
        for k, (score, place) in enumerate(zip(scores, places))
    ]
    width = (len(scores[0]) if scores else 0) + len(written) + 1 + (counts is not None)
    return torch.tensor(rows, dtype=torch.float64).reshape(len(places), width).clamp(min=FLOOR)


def fitted_weights(people_features, rights):
    """
    A weight per feature, fitted so that a softmax over each person's candidates picks the right
    one. `rights` holds the index of each person's place among their candidates, or None where it is
    not there; where it is nowhere, there are no weights and the summed score chooses.
    """
    fitted = [(f, right) for f, right in zip(people_features, rights) if right is not None]
    if not fitted:
        return ()
    stacked = torch.cat([f for f, _ in fitted])
    mean, scale = stacked.mean(0), stacked.std(0).nan_to_num(1.0).clamp(min=1e-6)
    weights = torch.zeros(stacked.size(1), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weights], max_iter=LBFGS_STEPS, line_search_fn="strong_wolfe")

    def loss():
        optimizer.zero_grad()
        picked = sum(
            -torch.log_softmax(((f - mean) / scale) @ weights, 0)[right] for f, right in fitted
        )
        total = picked / len(fitted) + L2 * weights.pow(2).sum()
        total.backward()
        return total

    optimizer.step(loss)
    # on the features as they are: the mean shifts every score alike
    return tuple((weights.detach() / scale).tolist())


def chosen(candidate_features, weights):
    """The index of the candidate of the highest score under `weights`; None without candidates."""
    if not len(candidate_features):
        return None
    return int((candidate_features @ torch.tensor(weights, dtype=torch.float64)).argmax())
