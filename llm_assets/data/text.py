"""Seeded made-up text, and the sampling helpers the dataset generators share.

The vocabulary is our own: words are built from a fixed list of invented syllables, so no
generated text is copied from anywhere. Word frequencies follow a Zipf-Mandelbrot law over
the vocabulary (short words are the most frequent, as in natural language), so texts share
common words and differ in their rare ones, which is what TF-IDF retrieval and prefix
caching see in real text.

Every function takes a `numpy.random.Generator`; the same generator state gives the same
output, and nothing here reads global random state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

VOCABULARY_SIZE = 6_000
"""Number of distinct words in the made-up vocabulary."""

NUM_COMMON_WORDS = 150
"""The most frequent words (ranks 0..149) play the role of stop words."""

_ONSETS = (
    "b c d f g h j k l m n p r s t v w z "
    "bl br ch cl cr dr fl fr gl gr kr pl pr sh sk sl sp st str th tr vr"
).split()
_NUCLEI = "a e i o u a e i o u ai ea ie oa ou y".split()
_CODAS = ("", "", "", "", "n", "r", "s", "l", "m", "t", "nd", "rk", "st", "x", "th")

_SENTENCE_END_RATE = 1 / 11
_COMMA_RATE = 1 / 16


@lru_cache(maxsize=4)
def vocabulary(size: int = VOCABULARY_SIZE, seed: int = 0) -> tuple[str, ...]:
    """`size` distinct lower-case made-up words, most frequent first (shorter words first,
    with some noise). Deterministic in (`size`, `seed`)."""
    if size < 1:
        raise ValueError(f"vocabulary size must be >= 1, got {size}")
    rng = np.random.default_rng([seed, 7_211])
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        num_syllables = int(rng.choice([1, 1, 2, 2, 2, 3]))
        word = "".join(
            _ONSETS[rng.integers(len(_ONSETS))]
            + _NUCLEI[rng.integers(len(_NUCLEI))]
            + _CODAS[rng.integers(len(_CODAS))]
            for _ in range(num_syllables)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    keys = np.array([len(w) for w in words]) + rng.normal(0.0, 2.0, size=size)
    return tuple(words[i] for i in np.argsort(keys, kind="stable"))


def zipf_weights(n: int, exponent: float = 1.0, offset: float = 2.7) -> np.ndarray:
    """Probabilities proportional to `1 / (rank + offset) ** exponent` for ranks 0..n-1."""
    if n < 1:
        raise ValueError(f"need at least one rank, got n={n}")
    w = 1.0 / (np.arange(n) + offset) ** exponent
    return w / w.sum()


@lru_cache(maxsize=4)
def _token_table(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens for every (form, word): forms are plain, Capitalised, plain + '.',
    Capitalised + '.', plain + ',', Capitalised + ','. Index = form * size + word."""
    words = vocabulary(size)
    caps = [w.capitalize() for w in words]
    forms = [
        list(words),
        caps,
        [w + "." for w in words],
        [w + "." for w in caps],
        [w + "," for w in words],
        [w + "," for w in caps],
    ]
    tokens = np.array([t for form in forms for t in form], dtype=object)
    lengths = np.array([len(t) for t in tokens], dtype=np.int64)
    return tokens, lengths


def _token_stream(
    rng: np.random.Generator,
    num_words: int,
    topic_words: np.ndarray | None,
    topic_rate: float,
) -> tuple[np.ndarray, np.ndarray]:
    size = VOCABULARY_SIZE
    words = rng.choice(size, size=num_words, p=zipf_weights(size))
    if topic_words is not None and len(topic_words) > 0 and topic_rate > 0:
        on_topic = rng.random(num_words) < topic_rate
        words[on_topic] = rng.choice(topic_words, size=int(on_topic.sum()))
    ends = rng.random(num_words) < _SENTENCE_END_RATE
    commas = ~ends & (rng.random(num_words) < _COMMA_RATE)
    capital = np.zeros(num_words, dtype=bool)
    capital[1:] = ends[:-1]
    form = capital.astype(np.int64) + 2 * ends + 4 * commas
    tokens, lengths = _token_table(size)
    index = form * size + words
    return tokens[index], lengths[index]


def random_texts(
    rng: np.random.Generator,
    lengths: Sequence[int] | np.ndarray,
    *,
    topic_words: Iterable[int] | None = None,
    topic_rate: float = 0.0,
) -> list[str]:
    """One made-up text per requested length (in characters).

    Each text is a run of sentences: it starts with a capital letter and ends with '.'.
    A text's length is the requested one to within about half a word (a text is at least
    one word long). `topic_words` (vocabulary ranks) replace a share `topic_rate` of the
    words, which makes texts generated with the same topic similar to each other.
    """
    # One less than asked: the closing '.' added below is not in the token lengths.
    targets = np.maximum(1, np.asarray(lengths, dtype=np.int64) - 1)
    topic = None if topic_words is None else np.fromiter(topic_words, dtype=np.int64)
    # Draw one word stream with a margin (tokens average well over 4 characters plus a space)
    # and top it up if it runs short. The text of tokens[a:b] is cum[b] - cum[a] - 1 long.
    num_words = int(targets.sum() / 5.0) + 64
    tokens, token_lengths = _token_stream(rng, num_words, topic, topic_rate)
    cum = np.concatenate([[0], np.cumsum(token_lengths + 1)])
    out: list[str] = []
    start = 0
    for target in targets:
        if cum[-1] - cum[start] < target + 64:
            more, more_lengths = _token_stream(rng, num_words, topic, topic_rate)
            tokens = np.concatenate([tokens[start:], more])
            token_lengths = np.concatenate([token_lengths[start:], more_lengths])
            cum = np.concatenate([[0], np.cumsum(token_lengths + 1)])
            start = 0
        # First end b with text length >= target, then step back if that is closer.
        end = int(np.searchsorted(cum, cum[start] + target + 1, side="left"))
        end = max(end, start + 1)
        if end - 1 > start and (cum[end] - cum[start] - 1) - target > target - (
            cum[end - 1] - cum[start] - 1
        ):
            end -= 1
        words = tokens[start:end].tolist()
        first = words[0]
        words[0] = first[0].upper() + first[1:]
        last = words[-1]
        if not last.endswith("."):
            words[-1] = last.rstrip(",") + "."
        out.append(" ".join(words))
        start = end
    return out


def unique_texts(
    rng: np.random.Generator,
    lengths: Sequence[int] | np.ndarray,
    *,
    topic_words: Iterable[int] | None = None,
    topic_rate: float = 0.0,
) -> list[str]:
    """Like `random_texts`, but the returned texts are pairwise distinct (texts that
    collide are drawn again)."""
    topic = None if topic_words is None else list(topic_words)
    texts = random_texts(rng, lengths, topic_words=topic, topic_rate=topic_rate)
    targets = np.asarray(lengths)
    for _ in range(100):
        seen: set[str] = set()
        redo = []
        for i, t in enumerate(texts):
            if t in seen:
                redo.append(i)
            seen.add(t)
        if not redo:
            return texts
        # Ask for a little more text so that short texts eventually differ.
        fresh = random_texts(rng, targets[redo] + 4, topic_words=topic, topic_rate=topic_rate)
        for i, t in zip(redo, fresh, strict=True):
            texts[i] = t
    raise RuntimeError("could not draw pairwise distinct texts; ask for longer texts")


def title_phrases(
    rng: np.random.Generator, n: int, min_words: int = 1, max_words: int = 4
) -> list[str]:
    """`n` pairwise distinct Title Case phrases of `min_words`..`max_words` made-up words,
    drawn from the less common part of the vocabulary (names sound like names)."""
    out: list[str] = []
    seen: set[str] = set()
    words = vocabulary()
    while len(out) < n:
        k = int(rng.integers(min_words, max_words + 1))
        ranks = rng.integers(NUM_COMMON_WORDS, len(words), size=k)
        phrase = " ".join(words[r].capitalize() for r in ranks)
        if phrase not in seen:
            seen.add(phrase)
            out.append(phrase)
    return out


def content_words(text: str) -> list[str]:
    """The lower-cased words of `text` that are not among the `NUM_COMMON_WORDS` most
    frequent vocabulary words, in order of appearance, without repeats."""
    common = set(vocabulary()[:NUM_COMMON_WORDS])
    seen: set[str] = set()
    out = []
    for raw in text.split():
        w = raw.strip(".,?!;:\"'").lower()
        if w and w not in common and w not in seen:
            seen.add(w)
            out.append(w)
    return out


# --- sampling helpers ---------------------------------------------------------------------


def scaled_count(full_count: int, full_rows: int, num_rows: int, minimum: int = 1) -> int:
    """`full_count * num_rows / full_rows`, rounded, and at least `minimum`."""
    return max(minimum, round(full_count * num_rows / full_rows))


def skewed_counts(
    rng: np.random.Generator, total: int, num_groups: int, exponent: float
) -> np.ndarray:
    """Sizes of `num_groups` groups summing to `total`; group k gets a Zipf-like share
    `1 / (k + 2.7) ** exponent` in a random order, and every group gets at least one member
    when `total >= num_groups`."""
    if num_groups < 1:
        raise ValueError(f"need at least one group, got {num_groups}")
    floor = 1 if total >= num_groups else 0
    counts = floor + rng.multinomial(total - floor * num_groups, zipf_weights(num_groups, exponent))
    return rng.permutation(counts)


def lognormal_lengths(
    rng: np.random.Generator, n: int, mean: float, sigma: float, minimum: int
) -> np.ndarray:
    """`n` integer lengths >= `minimum` from a log-normal shape, shifted so that their
    mean is `mean` (to within rounding, as long as `minimum` is well below `mean`)."""
    raw = rng.lognormal(0.0, sigma, size=n)
    x = raw / raw.mean() * mean
    for _ in range(20):
        x = np.maximum(x, minimum)
        x = x + (mean - x.mean())
    return np.maximum(np.rint(x), minimum).astype(np.int64)


def match_weighted_mean(
    lengths: np.ndarray, weights: np.ndarray, mean: float, minimum: int
) -> np.ndarray:
    """Adjust `lengths` so that both their plain mean and their `weights`-weighted mean are
    close to `mean` (e.g. a per-movie length whose average over movies and over reviews should
    both match the paper). Keeps the spread; lengths stay >= `minimum`."""
    x = np.asarray(lengths, dtype=float)
    w = np.asarray(weights, dtype=float)
    for _ in range(20):
        d = x - x.mean()
        wc = w - w.mean()
        if wc @ wc > 0:
            d = d - (d @ wc) / (wc @ wc) * wc
        x = np.maximum(mean + d, minimum)
    return np.rint(x).astype(np.int64)


def exact_flags(rng: np.random.Generator, multiplicities: np.ndarray, target: int) -> np.ndarray:
    """A boolean flag per group such that the flagged groups' multiplicities sum to `target`
    exactly whenever enough groups of multiplicity 1 exist (otherwise as close as possible).
    Groups of several rows are flagged at random with the target share, then singletons top
    up the count. Used to give copies of a row the same flag while hitting an exact row count
    (e.g. 'Fresh' rows)."""
    m = np.asarray(multiplicities, dtype=np.int64)
    share = target / max(1, int(m.sum()))
    multi = m > 1
    flags = multi & (rng.random(len(m)) < share)
    flagged = rng.permutation(np.flatnonzero(flags))
    excess = int(m[flags].sum()) - target
    for g in flagged:  # small targets: drop multi-row groups until the count fits
        if excess <= 0:
            break
        flags[g] = False
        excess -= m[g]
    singles = np.flatnonzero(~multi)
    needed = int(np.clip(target - int(m[flags].sum()), 0, len(singles)))
    flags[rng.choice(singles, size=needed, replace=False)] = True
    return flags
