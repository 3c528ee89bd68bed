"""A synthetic SQuAD v2-like question table, shaped like the official dev set (measured on
`shared/data/squad_v2_dev_half.csv`): about 40 contexts per title, 9.4 questions per context
(at least 3), contexts averaging 840 characters (log-normal spread, at least 170), questions
averaging 59 characters, 52% of questions unanswerable.

Questions are built from the content words of one sentence-sized window of their own
context (plus common words), so a lexical retriever (TF-IDF, BM25) ranks the right context
high; contexts of one title share topic words, so the other contexts of the title are the
hard negatives. Answerable questions' answers are spans of their context. All text is made up
(`llm_assets.data.text`).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from llm_assets.data.text import (
    NUM_COMMON_WORDS,
    VOCABULARY_SIZE,
    lognormal_lengths,
    title_phrases,
    unique_texts,
    vocabulary,
)

IMPOSSIBLE_SHARE = 3_168 / 6_078
"""Share of unanswerable questions in the dev-set half."""
QUESTIONS_PER_CONTEXT = 6_078 / 646
CONTEXTS_PER_TITLE = 646 / 16
MIN_QUESTIONS_PER_CONTEXT = 3
CONTEXT_MEAN_CHARS = 840
QUESTION_MEAN_CHARS = 59
TOPIC_WORDS_PER_TITLE = 30
TOPIC_RATE = 0.08

_WH = ("What", "Which", "Who", "When", "Where", "How many", "Why", "In what", "What is the")
_COLUMNS = ["id", "title", "context", "question", "answers", "is_impossible"]


def squad(
    num_questions: int = 5_000,
    seed: int = 0,
    num_contexts: int | None = None,
    *,
    impossible_share: float = IMPOSSIBLE_SHARE,
) -> dict[str, pd.DataFrame]:
    """`{"squad": DataFrame[id, title, context, question, answers, is_impossible]}`.

    Exactly `num_questions` rows have is_impossible False (the paper's Q5 keeps those);
    round(num_questions * share / (1 - share)) more are unanswerable. `num_contexts` defaults
    to the dev set's 9.4 questions per context; titles get ~40 contexts each. Rows are grouped
    by title, then by context (file order of the official JSON); id is a unique 24-hex-digit
    string; answers is JSON list text (an empty list for unanswerable questions; every answer
    of an answerable question occurs in its context). Same arguments give identical frames.
    """
    if num_questions < 1:
        raise ValueError(f"num_questions must be >= 1, got {num_questions}")
    if not 0.0 <= impossible_share < 1.0:
        raise ValueError(f"impossible_share must be in [0, 1), got {impossible_share}")
    num_impossible = round(num_questions * impossible_share / (1.0 - impossible_share))
    total = num_questions + num_impossible
    if num_contexts is None:
        num_contexts = max(1, round(total / QUESTIONS_PER_CONTEXT))
    if not 1 <= num_contexts <= total:
        raise ValueError(
            f"num_contexts must be between 1 and the number of questions ({total}), "
            f"got {num_contexts}"
        )
    rng = np.random.default_rng([seed, 3])
    num_titles = max(1, round(num_contexts / CONTEXTS_PER_TITLE))

    titles = ["_".join(t.split()) for t in title_phrases(rng, num_titles, 1, 3)]
    contexts_per_title = _spread(
        rng, num_contexts, num_titles, floor=num_contexts // (2 * num_titles)
    )
    context_lengths = lognormal_lengths(rng, num_contexts, CONTEXT_MEAN_CHARS, 0.45, minimum=170)
    contexts: list[str] = []
    context_title: list[int] = []
    start = 0
    for t, k in enumerate(contexts_per_title):
        topic = rng.choice(np.arange(NUM_COMMON_WORDS, VOCABULARY_SIZE), TOPIC_WORDS_PER_TITLE)
        contexts += unique_texts(
            rng, context_lengths[start : start + k], topic_words=topic, topic_rate=TOPIC_RATE
        )
        context_title += [t] * int(k)
        start += k

    floor = min(MIN_QUESTIONS_PER_CONTEXT, total // num_contexts)
    questions_per_context = _spread(rng, total, num_contexts, floor=floor)
    impossible = np.zeros(total, dtype=bool)
    impossible[rng.choice(total, size=num_impossible, replace=False)] = True
    question_lengths = lognormal_lengths(rng, total, QUESTION_MEAN_CHARS, 0.35, minimum=13)
    common = vocabulary()[:NUM_COMMON_WORDS]

    rows = []
    q = 0
    for c, k in enumerate(questions_per_context):
        tokens = contexts[c].split()
        for _ in range(k):
            question, answers = _question(
                rng, tokens, int(question_lengths[q]), common, impossible[q]
            )
            rows.append(
                (
                    rng.bytes(12).hex(),
                    titles[context_title[c]],
                    contexts[c],
                    question,
                    json.dumps(answers),
                    bool(impossible[q]),
                )
            )
            q += 1
    frame = pd.DataFrame(rows, columns=_COLUMNS)
    frame["is_impossible"] = frame["is_impossible"].astype(bool)
    return {"squad": frame}


def _spread(rng: np.random.Generator, total: int, groups: int, floor: int) -> np.ndarray:
    """Sizes of `groups` groups summing to `total`, each >= `floor`, the rest spread uniformly."""
    return floor + rng.multinomial(total - floor * groups, np.full(groups, 1.0 / groups))


def _clean(token: str) -> str:
    return token.strip(".,?!;:")


def _question(
    rng: np.random.Generator,
    tokens: list[str],
    target: int,
    common: tuple[str, ...],
    impossible: bool,
) -> tuple[str, list[str]]:
    """A question of about `target` characters from the words around a random position of
    the context, and its answers: 1-4 spans at that position (none when `impossible`)."""
    n = len(tokens)
    span = min(n, int(rng.integers(1, 5)))
    at = int(rng.integers(0, n - span + 1))
    lo, hi = max(0, at - 12), min(n, at + span + 12)
    common_set = set(common)
    window = [
        _clean(t).lower()
        for i, t in enumerate(tokens[lo:hi], start=lo)
        if not at <= i < at + span and _clean(t).lower() not in common_set
    ]
    window = list(dict.fromkeys(w for w in window if w))
    rng.shuffle(window)
    words = [str(_WH[rng.integers(len(_WH))])]
    length = len(words[0]) + 1  # the closing '?'
    while True:
        if window and (len(words) == 1 or rng.random() < 0.6):
            word = window.pop()
        else:
            word = common[int(rng.integers(len(common)))]
        # Stop where the length is closest to the target (at least one word after the wh-word).
        if len(words) > 1 and length + (len(word) + 1) / 2 > target:
            break
        words.append(word)
        length += len(word) + 1
    question = " ".join(words) + "?"
    if impossible:
        return question, []
    # Spans are verbatim substrings of the context (tokens are joined by single spaces).
    answer = _clean(" ".join(tokens[at : at + span]))
    answers = [answer]
    for _ in range(int(rng.choice([0, 1, 2, 3], p=[0.1, 0.2, 0.4, 0.3]))):
        if span > 1 and rng.random() < 0.25:
            answers.append(_clean(" ".join(tokens[at + 1 : at + span])))
        else:
            answers.append(answer)
    return question, answers
