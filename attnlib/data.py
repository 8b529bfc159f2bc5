"""Small datasets, made in code or read from a package that ships them: nothing here
downloads anything.

* ``royal_embeddings`` and ``word_embeddings``: hand-made word vectors whose dimensions
  mean something, small enough to compute with by hand.
* ``tagging_corpus``: sentences like "i saw a saw" with part-of-speech tags, where the
  same word is sometimes a verb and sometimes a noun.
* ``speech_like_signal`` and ``frame_signal``: a synthetic waveform and its cut into
  25 ms frames every 10 ms, the way speech becomes a sequence of vectors.
* ``ethanol``, ``example_graph``: a molecule, and the textbook's eight-node graph.
* Real data: ``date_examples`` (dates as the Unicode CLDR's locales write them, from the
  tables that ``babel`` ships), ``digit_images`` (scikit-learn's handwritten digits) and
  ``karate_club`` (Zachary's karate club, from networkx).
* ``card_sequences``, ``answer_positions`` and ``draw_digit_images``: the capstone's tasks
  (lesson 16), sequences of key–value cards to be drawn with the handwritten digits.
"""

from __future__ import annotations

import datetime
from typing import NamedTuple

import numpy as np

from . import _checks

__all__ = [
    "royal_embeddings",
    "word_embeddings",
    "WORD_FEATURES",
    "tagging_corpus",
    "TAGS",
    "AMBIGUOUS_WORDS",
    "speech_like_signal",
    "frame_signal",
    "frame_features",
    "Graph",
    "ethanol",
    "example_graph",
    "date_examples",
    "date_written_out",
    "DATE_LOCALES",
    "DATE_FORMATS",
    "digit_images",
    "karate_club",
    "dataset_descriptions",
    "CARD_TASKS",
    "EMPTY",
    "UNSCORED",
    "answer_positions",
    "card_sequences",
    "draw_digit_images",
]

# --------------------------------------------------------------------------- word vectors

ROYAL_EMBEDDINGS = {
    "king": (0.99, 0.01, 0.02),
    "queen": (0.97, 0.03, 0.02),
    "dog": (0.01, 0.02, 0.02),
}

#: What each dimension of ``word_embeddings`` means.
WORD_FEATURES = ("animal", "plant", "man-made", "large")
WORD_EMBEDDINGS = {
    "apple": (0.00, 0.95, 0.05, 0.10),
    "bag": (0.00, 0.05, 0.95, 0.20),
    "cat": (0.90, 0.00, 0.05, 0.20),
    "dog": (0.95, 0.00, 0.05, 0.35),
    "elephant": (0.90, 0.05, 0.00, 0.95),
}


def royal_embeddings() -> dict[str, np.ndarray]:
    """Three made-up 3-d embeddings; the first dimension reads as "royalty".

    >>> e = royal_embeddings()
    >>> round(float(e["king"] @ e["queen"]), 4), round(float(e["king"] @ e["dog"]), 4)
    (0.961, 0.0105)
    """
    return {word: np.array(vector) for word, vector in ROYAL_EMBEDDINGS.items()}


def word_embeddings() -> dict[str, np.ndarray]:
    """Five hand-made 4-d embeddings with dimensions ``WORD_FEATURES``.

    >>> sorted(word_embeddings())
    ['apple', 'bag', 'cat', 'dog', 'elephant']
    """
    return {word: np.array(vector) for word, vector in WORD_EMBEDDINGS.items()}


# --------------------------------------------------------------------------- tagging corpus

#: The part-of-speech tags of ``tagging_corpus``: pronoun, verb, determiner, adjective, noun.
TAGS = ("PRON", "VERB", "DET", "ADJ", "NOUN")
#: The words of ``tagging_corpus`` that occur both as a VERB and as a NOUN.
AMBIGUOUS_WORDS = ("saw", "duck", "fly", "watch")
_LEXICON = {
    "PRON": ("i", "you", "we", "they"),
    "VERB": ("saw", "duck", "fly", "watch", "see", "like", "cut"),
    "DET": ("a", "the"),
    "ADJ": ("old", "sharp", "small", "red"),
    "NOUN": ("saw", "duck", "fly", "watch", "dog", "cat", "man", "tree"),
}


def _noun_phrase(rng: np.random.Generator) -> list[tuple[str, str]]:
    """DET (ADJ) NOUN, e.g. "a sharp saw"; an adjective one time in three."""
    words = [(rng.choice(_LEXICON["DET"]), "DET")]
    if rng.random() < 1 / 3:
        words.append((rng.choice(_LEXICON["ADJ"]), "ADJ"))
    return [*words, (rng.choice(_LEXICON["NOUN"]), "NOUN")]


def _sentence(rng: np.random.Generator) -> list[tuple[str, str]]:
    """One sentence: PRON VERB NP ("i saw a saw") or NP VERB NP ("the duck saw a fly")."""
    subject = [(rng.choice(_LEXICON["PRON"]), "PRON")] if rng.random() < 0.5 else _noun_phrase(rng)
    verb = [(rng.choice(_LEXICON["VERB"]), "VERB")]
    return subject + verb + _noun_phrase(rng)


def tagging_corpus(num_sentences: int = 200, seed: int = 0):
    """Tagged sentences in a tiny English-like grammar where words can be verbs *and* nouns.

    Returns a list of ``(words, tags)`` pairs of equal-length lists; the tags are ``TAGS``.
    The first sentence is always "i saw a saw". The words in ``AMBIGUOUS_WORDS`` occur as
    both VERB and NOUN, so a tagger must look at the context to get them right.

    >>> words, tags = tagging_corpus(3)[0]
    >>> " ".join(words), " ".join(tags)
    ('i saw a saw', 'PRON VERB DET NOUN')
    """
    _checks.require_positive_int("tagging_corpus", "num_sentences", num_sentences)
    rng = np.random.default_rng(seed)
    sentences = [[("i", "PRON"), ("saw", "VERB"), ("a", "DET"), ("saw", "NOUN")]]
    sentences += [_sentence(rng) for _ in range(num_sentences - 1)]
    return [([str(w) for w, _ in s], [t for _, t in s]) for s in sentences]


# --------------------------------------------------------------------------- speech


def speech_like_signal(duration_s: float = 1.0, sample_rate: int = 16000, seed: int = 0):
    """A synthetic "utterance": vowel-like voiced segments separated by short silences.

    Each 150–250 ms segment is a harmonic tone (a pitch between 100 and 220 Hz with
    decaying overtones) under a smooth envelope, plus a little noise. Returns
    ``(samples (n,), segment_bounds)`` where ``segment_bounds`` lists ``(start_s, end_s)``
    of the voiced parts.

    >>> signal, bounds = speech_like_signal(0.5)
    >>> signal.shape
    (8000,)
    """
    _checks.require_positive_int("speech_like_signal", "sample_rate", sample_rate)
    rng = np.random.default_rng(seed)
    n = int(round(duration_s * sample_rate))
    t = np.arange(n) / sample_rate
    signal = 0.01 * rng.standard_normal(n)
    bounds, start = [], 0.05
    while start < duration_s - 0.1:
        end = min(start + rng.uniform(0.15, 0.25), duration_s - 0.02)
        pitch = rng.uniform(100.0, 220.0)
        inside = (t >= start) & (t < end)
        envelope = np.sin(np.pi * (t[inside] - start) / (end - start)) ** 2
        tone = sum(np.sin(2 * np.pi * h * pitch * t[inside]) / h for h in range(1, 6))
        signal[inside] += 0.5 * envelope * tone
        bounds.append((start, end))
        start = end + rng.uniform(0.05, 0.12)
    return signal, bounds


def frame_signal(signal, sample_rate: int = 16000, window_ms: float = 25.0, hop_ms: float = 10.0):
    """Cut a waveform into overlapping frames: one row per frame, no padding.

    With ``W`` samples per window and ``H`` per hop, a signal of ``n`` samples gives
    ``1 + (n - W) // H`` frames; at 25 ms / 10 ms that approaches 100 frames per second.
    Shape ``(num_frames, W)``.

    >>> frame_signal(np.zeros(16000)).shape   # one second at 16 kHz: 400-sample windows
    (98, 400)
    """
    signal = np.asarray(signal)
    _checks.require_ndim("frame_signal", "signal", signal, 1, "(n,)")
    window = int(round(window_ms * sample_rate / 1000))
    hop = int(round(hop_ms * sample_rate / 1000))
    if window < 1 or hop < 1 or len(signal) < window:
        raise ValueError(
            f"frame_signal: need at least one window of {window} samples and a hop of at least "
            f"1 sample; got signal.shape={signal.shape}, window={window}, hop={hop}"
        )
    starts = np.arange(0, len(signal) - window + 1, hop)
    return signal[starts[:, None] + np.arange(window)]


def frame_features(frames, num_bands: int = 16) -> np.ndarray:
    """Describe each frame by its log energy in ``num_bands`` equal frequency bands.

    A (much) simplified filter bank: Hann window, power spectrum, band sums, log.
    ``(num_frames, W)`` → ``(num_frames, num_bands)``: one vector per frame.

    >>> frame_features(frame_signal(speech_like_signal(0.5)[0])).shape   # 48 frames
    (48, 16)
    """
    frames = np.asarray(frames)
    spectrum = np.abs(np.fft.rfft(frames * np.hanning(frames.shape[-1]), axis=-1)) ** 2
    bands = np.array_split(spectrum[:, 1:], num_bands, axis=-1)
    return np.log10(np.stack([b.sum(axis=-1) for b in bands], axis=-1) + 1e-10)


# --------------------------------------------------------------------------- graphs


class Graph(NamedTuple):
    """Nodes with feature vectors (rows of ``features``) and undirected ``edges``.

    >>> mol = ethanol()
    >>> mol.node_names[:3], mol.features.shape, mol.edges[0]
    (['C0', 'C1', 'O2'], (9, 3), (0, 1))
    """

    #: The names of the N nodes.
    node_names: list[str]
    #: The names of the F features.
    feature_names: list[str]
    #: One feature vector per node, ``(N, F)``.
    features: np.ndarray
    #: Pairs ``(i, j)`` of 0-based node indices, each undirected edge listed once.
    edges: list[tuple[int, int]]


def ethanol() -> Graph:
    """Ethanol, C2H5OH: nine atoms as one-hot vectors over (H, C, O), and eight bonds.

    >>> mol = ethanol()
    >>> mol.features.shape, len(mol.edges)
    ((9, 3), 8)
    """
    elements = ["C", "C", "O", "H", "H", "H", "H", "H", "H"]
    feature_names = ["H", "C", "O"]
    features = np.array([[float(e == f) for f in feature_names] for e in elements])
    bonds = [(0, 1), (1, 2), (0, 3), (0, 4), (0, 5), (1, 6), (1, 7), (2, 8)]
    names = [f"{e}{i}" for i, e in enumerate(elements)]
    return Graph(names, feature_names, features, bonds)


def example_graph(num_features: int = 4, seed: int = 0) -> Graph:
    """The eight-node graph of the LeeDL textbook's graph example, with random node features.

    The textbook fixes two neighbourhoods: node 1 is linked only to nodes 5, 6 and 8, and node 2
    only to node 3; the other edges (3–4, 4–7, 5–6, 7–8) complete it into one connected graph.
    Nodes are named "1" … "8" as in the book; ``edges`` use 0-based indices.

    >>> g = example_graph()
    >>> sorted(int(g.node_names[j]) for i, j in g.edges if g.node_names[i] == "1")
    [5, 6, 8]
    """
    _checks.require_positive_int("example_graph", "num_features", num_features)
    pairs = [(1, 5), (1, 6), (1, 8), (2, 3), (3, 4), (4, 7), (5, 6), (7, 8)]
    features = np.random.default_rng(seed).normal(size=(8, num_features))
    names = [str(i) for i in range(1, 9)]
    feature_names = [f"f{i}" for i in range(num_features)]
    return Graph(names, feature_names, features, [(i - 1, j - 1) for i, j in pairs])


# --------------------------------------------------------------------------- real data

#: The locales whose dates ``date_examples`` writes (CLDR names).
DATE_LOCALES = (
    *("en_US", "en_GB", "fr", "de", "es", "it", "pt_BR", "nl", "sv", "pl"),
    *("ru", "zh", "ja", "ko", "tr", "fi", "cs", "hu", "vi", "id"),
)
#: The CLDR date formats that ``date_examples`` uses: in ``en_US``, from "3/8/20" (short) to
#: "Sunday, March 8, 2020" (full).
DATE_FORMATS = ("short", "medium", "long", "full")
#: Dates are drawn from these 100 years: exactly the years that a two-digit year ("26")
#: stands for under the POSIX rule that Python's strptime uses (69-99: 19xx, 00-68: 20xx).
FIRST_DATE, LAST_DATE = datetime.date(1969, 1, 1), datetime.date(2068, 12, 31)


def date_written_out(date: datetime.date) -> str:
    """``date`` written out in English, as the CLDR's British long format writes it.

    The day has no leading zero and the month its full name, so the text takes 10
    ("1 May 1969") to 17 ("30 September 2030") characters: its length depends on the date.

    >>> date_written_out(datetime.date(2026, 3, 4))
    '4 March 2026'
    """
    from babel.dates import format_date  # imported here: only the dates need babel

    return format_date(date, "long", locale="en_GB")


#: The standard forms that ``date_examples`` can write as targets, by name.
DATE_TARGETS = {"written": date_written_out, "iso": datetime.date.isoformat}


def date_examples(
    n: int, seed: int = 0, locales=DATE_LOCALES, formats=DATE_FORMATS, target: str = "written"
) -> list[tuple[str, str]]:
    """``n`` random dates written the way real locales write them, each with a standard form.

    Each source is ``"<locale>|<date>"``, the date formatted by the Unicode CLDR's rules for
    that locale and a format drawn from ``formats`` (the tables ``babel`` ships); the locale
    is part of the input because "03/04/26" is the 4th of March in ``en_US`` and the 3rd of
    April in ``en_GB``. The target is the date written out in English (``target="written"``,
    by ``date_written_out``: "4 March 2026", 10 to 17 characters) or its ISO form
    (``target="iso"``: "2026-03-04", always 10). The dates lie in 1969–2068: the years that a
    two-digit year stands for under the POSIX rule (69–99 → 1969–1999, 00–68 → 2000–2068),
    so every short form has one reading. The same ``n`` and ``seed`` draw the same dates and
    locales whatever ``formats`` and ``target`` are. Returns ``(source, target)`` pairs.

    >>> for source, target in date_examples(3, seed=1, locales=("en_US", "fr", "zh")):
    ...     print(source, "->", target)
    zh|2016年4月27日星期三 -> 27 April 2016
    en_US|Sunday, March 8, 2020 -> 8 March 2020
    en_US|7/8/44 -> 8 July 2044
    >>> date_examples(2, seed=1, locales=("en_US",), formats=("short",), target="iso")
    [('en_US|4/27/16', '2016-04-27'), ('en_US|3/8/20', '2020-03-08')]
    """
    from babel.dates import format_date  # imported here: only the dates need babel

    _checks.require_positive_int("date_examples", "n", n)
    if target not in DATE_TARGETS:
        raise ValueError(
            f"date_examples: target must be one of {sorted(DATE_TARGETS)}; got {target!r}"
        )
    write_target = DATE_TARGETS[target]
    rng = np.random.default_rng(seed)
    days = rng.integers(0, (LAST_DATE - FIRST_DATE).days + 1, n)
    chosen_locales = rng.integers(0, len(locales), n)
    chosen_formats = rng.integers(0, len(formats), n)
    examples = []
    for day, locale_index, format_index in zip(days, chosen_locales, chosen_formats):
        date = FIRST_DATE + datetime.timedelta(days=int(day))
        locale = locales[locale_index]
        written = format_date(date, formats[format_index], locale=locale)
        examples.append((f"{locale}|{written}", write_target(date)))
    return examples


def digit_images() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 handwritten digits: ``(images (1797, 8, 8) in [0, 1], labels)``.

    The 8 × 8 greyscale scans (UCI "Optical Recognition of Handwritten Digits", 43 writers)
    ship with scikit-learn; their 17 grey levels (0-16) are scaled to [0, 1].

    >>> images, labels = digit_images()
    >>> images.shape, labels[:10].tolist()
    ((1797, 8, 8), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    """
    from sklearn.datasets import load_digits  # imported here: only the digits need sklearn

    digits = load_digits()
    return digits.images / 16.0, digits.target


def karate_club() -> tuple[Graph, np.ndarray]:
    """Zachary's karate club (1977), a real social network, and its real split.

    34 members, an edge between two who met outside the club, 78 edges. After a conflict
    the club split in two: ``labels`` is 0 for those who stayed with the instructor ("Mr.
    Hi", node 0) and 1 for those who followed the administrator ("Officer", node 33). The
    nodes have no features of their own: ``features`` is the identity, one-hot per member.

    >>> graph, labels = karate_club()
    >>> len(graph.node_names), len(graph.edges), int(labels.sum()), int(labels[0]), int(labels[33])
    (34, 78, 17, 0, 1)
    """
    import networkx as nx  # imported here: only the karate club needs networkx

    club = nx.karate_club_graph()
    labels = np.array([int(club.nodes[i]["club"] == "Officer") for i in club.nodes])
    names = [str(i) for i in club.nodes]
    edges = [(int(i), int(j)) for i, j in club.edges]
    return Graph(names, names, np.eye(len(names)), edges), labels


# --------------------------------------------------------------------------- key–value cards
# The tasks of the capstone (lesson 16). A token is a card that shows two handwritten digits,
# a key and a value; every scored position must report a value that lies on another card. The
# three tasks differ only in how that card is found: by its position, by its key, or by a key
# that changes from one question to the next.

#: The capstone's tasks, in the order that lesson 16 trains them.
CARD_TASKS = ("reach", "content", "recall")
#: An empty slot: the value of a question card in the ``"recall"`` task.
EMPTY = -1
#: The label of a position that is not scored; PyTorch's ``cross_entropy`` ignores it.
UNSCORED = -100


def card_sequences(
    task: str, num_sequences: int, length: int, rng=None, pairs: int = 8
) -> tuple[np.ndarray, np.ndarray]:
    """Sequences of key–value cards, and the value digit that each position must report.

    Each token is a card with a key digit and a value digit; digits are drawn uniformly.

    * ``"reach"``: every position reports the value on card 0, which only its *position*
      marks (its key is random, like all the others).
    * ``"content"``: exactly one card has the key 0, at a random position (the others have
      keys 1–9); every position reports that card's value.
    * ``"recall"``: ``pairs`` cards with distinct keys lie at random positions; every other
      token is a question, a card with one of those keys and an ``EMPTY`` value, and reports
      the value on the card with its key (as in multi-query associative recall, Arora et al.,
      2023).

    The card that holds an answer is not scored at its own position (``UNSCORED``). Returns
    ``(cards, labels)``: integer arrays ``(num_sequences, length, 2)`` (``[..., 0]`` the keys,
    ``[..., 1]`` the values) and ``(num_sequences, length)``. ``rng`` is a NumPy generator or
    a seed.

    >>> cards, labels = card_sequences("recall", 1, 6, rng=0, pairs=2)
    >>> cards[0].tolist()
    [[3, 2], [2, -1], [2, 8], [3, -1], [3, -1], [3, -1]]
    >>> labels[0].tolist()
    [-100, 8, -100, 2, 2, 2]
    """
    fn = "card_sequences"
    _checks.check_choice(fn, "task", task, CARD_TASKS)
    _checks.require_positive_int(fn, "num_sequences", num_sequences)
    _checks.require_positive_int(fn, "length", length)
    _checks.require_positive_int(fn, "pairs", pairs)
    if length < 2:
        raise ValueError(f"{fn}: length must be >= 2 (a card and a position that reads it)")
    if task == "recall" and not pairs < min(length, 11):
        raise ValueError(
            f"{fn}: pairs must be < {min(length, 11)} for length={length} (distinct keys among "
            f"the 10 digits, and at least one question); got pairs={pairs}"
        )
    rng = np.random.default_rng(rng)
    if task == "recall":
        return _recall_cards(rng, num_sequences, length, pairs)
    rows, shape = np.arange(num_sequences)[:, None], (num_sequences, length)
    keys = rng.integers(1 if task == "content" else 0, 10, shape)
    values = rng.integers(0, 10, shape)
    if task == "reach":  # the answer is on card 0
        where = np.zeros((num_sequences, 1), dtype=int)
    else:  # content: the answer is on the only card with the key 0, anywhere
        where = rng.integers(0, length, (num_sequences, 1))
        keys[rows, where] = 0
    labels = np.repeat(values[rows, where], length, axis=1)
    labels[rows, where] = UNSCORED
    return np.stack([keys, values], axis=-1), labels


def _recall_cards(rng, num_sequences: int, length: int, pairs: int):
    """``card_sequences`` for the ``"recall"`` task."""
    rows = np.arange(num_sequences)[:, None]
    card_keys = np.argsort(rng.random((num_sequences, 10)), axis=1)[:, :pairs]  # distinct
    card_values = rng.integers(0, 10, (num_sequences, pairs))
    card_positions = np.argsort(rng.random((num_sequences, length)), axis=1)[:, :pairs]
    asked = rng.integers(0, pairs, (num_sequences, length))  # which card each question asks
    keys, labels = card_keys[rows, asked], card_values[rows, asked]
    values = np.full((num_sequences, length), EMPTY)
    keys[rows, card_positions] = card_keys
    values[rows, card_positions] = card_values
    labels[rows, card_positions] = UNSCORED
    return np.stack([keys, values], axis=-1), labels


def answer_positions(task: str, cards) -> np.ndarray:
    """For every position of ``card_sequences(task, ...)``'s ``cards``, the position of the card
    that holds its answer: card 0 (``"reach"``), the card with the key 0 (``"content"``), or
    the card with the question's key (``"recall"``; a card points at itself).

    Returns an integer array ``(num_sequences, length)``.

    >>> cards, labels = card_sequences("recall", 1, 6, rng=0, pairs=2)
    >>> answer_positions("recall", cards)[0].tolist()
    [0, 2, 2, 0, 0, 0]
    """
    fn = "answer_positions"
    _checks.check_choice(fn, "task", task, CARD_TASKS)
    cards = np.asarray(cards)
    if cards.ndim != 3 or cards.shape[-1] != 2:
        raise ValueError(f"{fn}: cards must have shape (N, L, 2); got {cards.shape}")
    keys, values = cards[..., 0], cards[..., 1]
    if task == "reach":
        return np.zeros(keys.shape, dtype=int)
    if task == "content":
        return np.repeat((keys == 0).argmax(axis=1)[:, None], keys.shape[1], axis=1)
    holds = (keys[:, :, None] == keys[:, None, :]) & (values != EMPTY)[:, None, :]
    return holds.argmax(axis=2)  # the one card with the key of each position


def draw_digit_images(symbols, image_digits, pool, rng=None) -> np.ndarray:
    """For every digit in ``symbols``, the index of a random image of that digit in ``pool``.

    ``image_digits[i]`` is the digit shown by image ``i`` (the labels of ``digit_images()``);
    ``pool`` lists the images that may be drawn, such as a training or a test split. Entries
    equal to ``EMPTY`` stay ``EMPTY``. Returns an integer array of the shape of ``symbols``.

    >>> image_digits = np.array([3, 1, 3, 0, 1])
    >>> draw_digit_images([[3, -1], [1, 3]], image_digits, pool=[0, 1, 2, 3], rng=0).tolist()
    [[2, -1], [1, 2]]
    """
    fn = "draw_digit_images"
    symbols, image_digits, pool = np.asarray(symbols), np.asarray(image_digits), np.asarray(pool)
    rng = np.random.default_rng(rng)
    indices = np.full(symbols.shape, EMPTY)
    for digit in np.unique(symbols[symbols != EMPTY]):
        candidates = pool[image_digits[pool] == digit]
        if len(candidates) == 0:
            raise ValueError(f"{fn}: pool has no image of the digit {digit}")
        where = symbols == digit
        indices[where] = candidates[rng.integers(0, len(candidates), where.sum())]
    return indices


def dataset_descriptions() -> str:
    """The descriptions of scikit-learn's datasets, as one English text (about 43,000
    characters): the reStructuredText files that scikit-learn ships in
    ``sklearn/datasets/descr`` (the iris, digits, newsgroups … datasets, their sources,
    sizes and uses), in the order of their file names, separated by blank lines.

    Real prose written by people, with its markup, for a small character-level language
    model; nothing is downloaded.

    >>> text = dataset_descriptions()
    >>> text[:31]
    '.. _breast_cancer_dataset:\\n\\nBre'
    """
    from importlib import resources

    folder = resources.files("sklearn.datasets.descr")
    names = sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".rst"))
    return "\n\n".join((folder / name).read_text(encoding="utf-8").strip() for name in names)
