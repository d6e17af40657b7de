"""Text-level template metrics of a batch's reasoning: distinct-n, self-BLEU and cross-prompt n-gram overlap.

The MI proxies ask whether reasoning *depends on its input*; these ask how much of it is *shared text*. A chain is any
sequence of hashable tokens (token ids, or words in the tests); `groups[i]` names the prompt chain i was written for.

- [`distinct_n`]: distinct n-grams over all n-grams of the batch (Li et al., 2016). Low: repetitive reasoning.
- [`self_bleu`]: the mean BLEU-4 of each chain against the others as references (Zhu et al., 2018), either the
  other chains of its prompt group (`within`) or the chains of the other prompts (`across`). High across prompts:
  the same text is written whatever the input, the textual face of template collapse.
- [`cross_prompt_overlap`]: the share of a chain's distinct n-grams that also occur in the reasoning of another
  prompt, averaged over chains.

BLEU ([`bleu`]) is sentence BLEU (Papineni et al., 2002): modified n-gram precisions clipped by the largest count
in any reference, their geometric mean with uniform weights, and the brevity penalty against the reference length
closest to the chain's (the shorter on a tie). Precisions with no match get NLTK's smoothing method 1 (a numerator
of 0.1), and a chain without a matching unigram scores 0. These are the conventions of
`nltk.translate.bleu_score.sentence_bleu(..., smoothing_function=SmoothingFunction().method1)`, which the tests
compare with. Pure Python, no torch.

```python
from trl_ragen2.collapse.text_metrics import text_template_metrics

text_template_metrics([[1, 2, 3], [1, 2, 4], [7, 8, 9]], groups=["a", "a", "b"])
```
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Hashable, Sequence


BLEU_ORDER = 4
SMOOTHING_EPSILON = 0.1  # NLTK's SmoothingFunction().method1
OVERLAP_ORDER = 3
DISTINCT_ORDERS = (1, 2)
TEXT_KEYS = (
    *(f"distinct_{n}" for n in DISTINCT_ORDERS),
    "self_bleu_within",
    "self_bleu_across",
    "cross_prompt_overlap",
    "num_chains",
)

Chain = Sequence[Hashable]


def ngrams(chain: Chain, n: int) -> Counter:
    """Counts of the n-grams (tuples) of one chain."""
    return Counter(tuple(chain[i : i + n]) for i in range(len(chain) - n + 1))


def distinct_n(chains: Sequence[Chain], n: int) -> float:
    """Distinct n-grams / all n-grams over the chains; NaN when no chain has n tokens."""
    seen, total = set(), 0
    for chain in chains:
        counts = ngrams(chain, n)
        seen.update(counts)
        total += sum(counts.values())
    return len(seen) / total if total else math.nan


def _closest(lengths: Sequence[int], length: int) -> int:
    """The reference length closest to `length`, the shorter on a tie; `lengths` sorted."""
    at = bisect.bisect_left(lengths, length)
    candidates = lengths[max(at - 1, 0) : at + 1]
    return min(candidates, key=lambda r: (abs(r - length), r))


def _bleu_from_counts(
    hypothesis: list[Counter], length: int, max_ref_count, ref_length: int, max_n: int = BLEU_ORDER
) -> float:
    """BLEU from the chain's n-gram counts per order, the largest reference count of an n-gram (a function of
    (order, n-gram)) and the closest reference length."""
    numerators, denominators = [], []
    for n, counts in enumerate(hypothesis, start=1):
        numerators.append(sum(min(c, max_ref_count(n, gram)) for gram, c in counts.items()))
        denominators.append(max(1, sum(counts.values())))
    if numerators[0] == 0:
        return 0.0
    log_precision = sum(
        math.log((num if num else SMOOTHING_EPSILON) / den) for num, den in zip(numerators, denominators, strict=True)
    )
    brevity = 1.0 if length > ref_length else math.exp(1 - ref_length / length)
    return brevity * math.exp(log_precision / max_n)


def bleu(hypothesis: Chain, references: Sequence[Chain], max_n: int = BLEU_ORDER) -> float:
    """Sentence BLEU-`max_n` of one chain against references (see the module docstring for the conventions)."""
    if not references:
        raise ValueError("bleu needs at least one reference")
    if not hypothesis:
        return 0.0
    counts = [ngrams(hypothesis, n) for n in range(1, max_n + 1)]
    refs = {n: [ngrams(r, n) for r in references] for n in range(1, max_n + 1)}

    def max_ref_count(n, gram):
        return max(r[gram] for r in refs[n])

    ref_length = _closest(sorted(len(r) for r in references), len(hypothesis))
    return _bleu_from_counts(counts, len(hypothesis), max_ref_count, ref_length, max_n)


class _TopTwo:
    """Per key: the largest value with its owner, and the largest value of any other owner."""

    def __init__(self):
        self.best: dict = {}

    def add(self, key, owner, value) -> None:
        first, first_owner, second = self.best.get(key, (0, None, 0))
        if value > first:
            self.best[key] = (value, owner, first if first_owner != owner else second)
        elif owner != first_owner and value > second:
            self.best[key] = (first, first_owner, value)

    def excluding(self, key, owner) -> int:
        first, first_owner, second = self.best.get(key, (0, None, 0))
        return second if first_owner == owner else first


def self_bleu(chains: Sequence[Chain], groups: Sequence[Hashable], within: bool, max_n: int = BLEU_ORDER) -> float:
    """Mean BLEU of each chain against the other chains of its group (`within=True`) or those of the other groups.

    Chains that are empty or have no reference (a group of one, or a batch of one group) are skipped; NaN when no
    chain is left. Each chain costs time linear in its own n-grams (the largest reference counts are indexed).
    """
    if len(chains) != len(groups):
        raise ValueError(f"chains ({len(chains)}) and groups ({len(groups)}) must have the same length")
    counts = [[ngrams(chain, n) for n in range(1, max_n + 1)] for chain in chains]
    owners = list(range(len(chains))) if within else list(groups)
    index = {n: _TopTwo() for n in range(1, max_n + 1)}  # n -> n-gram -> top counts by owner
    members: dict = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    for group, rows in members.items():
        for i in rows:
            for n, grams in enumerate(counts[i], start=1):
                for gram, c in grams.items():
                    # within: index each group separately (keys carry the group), owners are chains
                    index[n].add((group, gram) if within else gram, owners[i], c)
    group_lengths = {group: sorted(len(chains[i]) for i in rows) for group, rows in members.items()}
    other_lengths = {  # across: the lengths of every chain outside the group
        group: sorted(len(chains[i]) for other, rows in members.items() if other != group for i in rows)
        for group in members
    }
    scores = []
    for i, chain in enumerate(chains):
        group = groups[i]
        if within:
            lengths = list(group_lengths[group])
            lengths.remove(len(chain))
        else:
            lengths = other_lengths[group]
        if not chain or not lengths:
            continue

        def max_ref_count(n, gram, i=i, group=group):
            return index[n].excluding((group, gram) if within else gram, owners[i])

        scores.append(_bleu_from_counts(counts[i], len(chain), max_ref_count, _closest(lengths, len(chain)), max_n))
    return sum(scores) / len(scores) if scores else math.nan


def cross_prompt_overlap(chains: Sequence[Chain], groups: Sequence[Hashable], n: int = OVERLAP_ORDER) -> float:
    """Mean over chains of the share of their distinct n-grams that occur in a chain of another group.

    1 when every n-gram of every chain is also written for another prompt; NaN when no chain has n tokens or the
    batch holds one group.
    """
    if len(set(groups)) < 2:
        return math.nan
    grams = [set(ngrams(chain, n)) for chain in chains]
    owners = _TopTwo()
    for gram_set, group in zip(grams, groups, strict=True):
        for gram in gram_set:
            owners.add(gram, group, 1)
    shares = [
        sum(owners.excluding(gram, group) > 0 for gram in gram_set) / len(gram_set)
        for gram_set, group in zip(grams, groups, strict=True)
        if gram_set
    ]
    return sum(shares) / len(shares) if shares else math.nan


def text_template_metrics(chains: Sequence[Chain], groups: Sequence[Hashable]) -> dict[str, float]:
    """All template metrics of one batch: `distinct_1`, `distinct_2`, `self_bleu_within`, `self_bleu_across`,
    `cross_prompt_overlap` (trigrams) and `num_chains` (the non-empty chains)."""
    kept = [(chain, group) for chain, group in zip(chains, groups, strict=True) if len(chain)]
    chains, groups = [c for c, _ in kept], [g for _, g in kept]
    metrics = {f"distinct_{n}": distinct_n(chains, n) for n in DISTINCT_ORDERS}
    metrics["self_bleu_within"] = self_bleu(chains, groups, within=True)
    metrics["self_bleu_across"] = self_bleu(chains, groups, within=False)
    metrics["cross_prompt_overlap"] = cross_prompt_overlap(chains, groups)
    metrics["num_chains"] = float(len(chains))
    return metrics
