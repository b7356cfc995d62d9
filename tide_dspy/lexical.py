"""Link artifacts by the rare tokens they share, with no model: the text-reading chance floor (`LexicalJoin`).

Each artifact's rendered text becomes a set of tokens: words, identifiers and dotted names (a call such as
`self.linesep.join` also gives `linesep` and `join`), ids (`REQ-26-0412`), figures (`$68,400`) and dates (`3/13`).
A token is weighted by its inverse document frequency over the instance's artifacts, so an id, a name or a figure
that two items share links them strongly, and a word most items use links nothing. Two artifacts are linked by
the cosine of their IDF-weighted token sets; in code this joins a caller and its callee (the callee's name) and the
methods of one class or file, in a workspace the items about one order, person or date.

`tfidf_weights` links artifacts the textbook way instead, for the TF-IDF floor (`TfidfSimilarity`): the cosine of
their TF-IDF vectors (scikit-learn's TfidfVectorizer: word counts, not sets, and every word, common ones too).

`linked_groups` grows groups of a given size from the strongest links (of either weighting) and returns the
tightest ones first. Ties break on artifact ids, never on the order a context lists them, so a shuffled context
gives the same groups.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import combinations

# A token: letters, digits and underscores, joined by the separators of ids, paths, figures and dates.
_TOKEN = re.compile(r"[$€£]?\w+(?:[-/.,:']\w+)*")
_PARTS = re.compile(r"[-/.,:']")
MIN_TOKEN_CHARS = 2
# A token in more than this share of the artifacts says nothing about which ones belong together.
MAX_DOCUMENT_SHARE = 0.5
# Groups are grown from this many of the strongest links per group asked for.
SEEDS_PER_GROUP = 6


def tokens(text: str) -> set[str]:
    """The case-folded tokens of `text`, with the parts of dotted or hyphenated ones."""
    found: set[str] = set()
    for match in _TOKEN.finditer(text):
        token = match.group(0).casefold()
        if len(token) >= MIN_TOKEN_CHARS:
            found.add(token)
        parts = [p for p in _PARTS.split(token.lstrip("$€£")) if len(p) >= MIN_TOKEN_CHARS]
        if len(parts) > 1:
            found.update(parts)
    return found


def link_weights(texts: dict[str, str]) -> dict[tuple[str, str], float]:
    """(a, b) with a < b -> the cosine of their IDF-weighted token sets, for every pair that shares a rare token."""
    sets = {key: tokens(text) for key, text in texts.items()}
    n = len(sets)
    holders: dict[str, list[str]] = defaultdict(list)
    for key in sorted(sets):
        for token in sets[key]:
            holders[token].append(key)
    idf = {t: math.log(n / len(keys)) for t, keys in holders.items()}
    norm = {key: math.sqrt(sum(idf[t] ** 2 for t in found)) or 1.0 for key, found in sets.items()}
    shared: dict[tuple[str, str], float] = defaultdict(float)
    for token, keys in holders.items():
        if 2 <= len(keys) <= max(2, MAX_DOCUMENT_SHARE * n):
            for a, b in combinations(keys, 2):  # keys are sorted, so a < b
                shared[a, b] += idf[token] ** 2
    return {pair: value / (norm[pair[0]] * norm[pair[1]]) for pair, value in shared.items()}


def tfidf_weights(texts: dict[str, str]) -> dict[tuple[str, str], float]:
    """(a, b) with a < b -> the cosine of their TF-IDF vectors (scikit-learn's defaults: words of two or more
    characters, smoothed IDF, L2 norm), for every pair that shares a word."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    keys = sorted(texts)
    try:
        vectors = TfidfVectorizer().fit_transform([texts[k] for k in keys])
    except ValueError:  # no word in any text: nothing links
        return {}
    similar = (vectors @ vectors.T).tocoo()
    return {(keys[i], keys[j]): float(v) for i, j, v in zip(similar.row, similar.col, similar.data) if i < j and v > 0}


def _weight(weights: dict[tuple[str, str], float], a: str, b: str) -> float:
    return weights.get((a, b) if a < b else (b, a), 0.0)


def _grow(seed: tuple[str, ...], keys: Sequence[str], links: dict[str, dict[str, float]], size: int,
          tie: dict[str, tuple[int, ...]]) -> tuple[str, ...]:
    """The seed, extended one artifact at a time by the one most linked to the group so far (`links`: each key's
    weight to each linked key; `tie`: each key's _reverse, computed once)."""
    group = list(seed)
    while len(group) < size:
        rest = [k for k in keys if k not in group]
        if not rest:
            break
        group.append(max(rest, key=lambda k: (sum(links[k].get(g, 0.0) for g in group), tie[k])))
    return tuple(sorted(group))


def _reverse(key: str) -> tuple[int, ...]:
    """A tie-break on the id under max(), independent of any listing order."""
    return tuple(-ord(c) for c in key)


def _cohesion(group: tuple[str, ...], weights) -> float:
    """The mean link weight over the group's pairs."""
    pairs = list(combinations(group, 2))
    return sum(_weight(weights, a, b) for a, b in pairs) / len(pairs) if pairs else 0.0


def linked_groups(texts: dict[str, str], size: int, count: int,
                  weigh: Callable[[dict[str, str]], dict[tuple[str, str], float]] = link_weights) -> list[list[str]]:
    """Up to `count` groups of `size` artifact ids (keys of `texts`), the most cohesive first under `weigh`'s links
    (link_weights: shared rare tokens; tfidf_weights: TF-IDF cosine).

    Groups grow from the strongest links, and from every artifact with its strongest neighbours, so there are
    enough of them. A group shares at most one artifact with any group ranked above it, unless too few such groups
    exist; then the next most cohesive ones fill up."""
    if size < 1 or count < 1 or not texts:
        return []
    keys = sorted(texts)
    if size == 1:
        return [[k] for k in keys[:count]]
    weights = weigh(texts)
    seeds = sorted(weights, key=lambda pair: (-weights[pair], pair))[: SEEDS_PER_GROUP * count]
    links: dict[str, dict[str, float]] = {k: {} for k in keys}
    for (a, b), w in weights.items():
        links[a][b] = links[b][a] = w
    tie = {k: _reverse(k) for k in keys}
    candidates = {_grow(seed, keys, links, size, tie) for seed in [*seeds, *((k,) for k in keys)]}
    ranked = sorted(candidates, key=lambda g: (-_cohesion(g, weights), g))
    chosen: list[tuple[str, ...]] = []
    for group in ranked:
        if all(len(set(group) & set(c)) <= 1 for c in chosen):
            chosen.append(group)
    chosen += [g for g in ranked if g not in chosen]
    return [list(g) for g in chosen[:count]]
