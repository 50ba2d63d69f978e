"""Grading an answer by what it means, not by the words of an id.

Each scenario declares its cause (`labs.run.contract.Cause`): the concepts an answer must name
to name it, and clues that point at it. An answer is read into the concepts it names: words
in any form (a Snowball stemmer: taints, tainted), objects and fields as their words
(`nvidia.com/gpu`, `resources.limits`, `runtimeClassName`), one typo forgiven in a longer
word. The cause it names is the one whose concepts are all there and that has the most of its
concepts and clues there (a literal finding id or scenario name settles it); it is graded
right when that is the fault's cause, the right layer when it is another cause of the same
area or names only the area, and wrong otherwise.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import snowballstemmer

from labs.run.contract import Area, Scenario

RIGHT, RIGHT_LAYER, WRONG = 1.0, 0.5, 0.0
GRADE_WORDS = {RIGHT: "right", RIGHT_LAYER: "the right layer, not the cause", WRONG: "wrong"}
# Naming the area and no cause is the right layer; each area's first phrase is its label.
AREA_WORDS: dict[Area, tuple[str, ...]] = {
    "operator": ("GPU Operator", "operator", "ClusterPolicy", "operands"),
    "node": ("one node", "single node", "node-level", "node problem", "node issue",
             "specific node", "that node", "bad node", "per node", "kubelet"),
    "network": ("network", "connectivity", "not talk", "not reach",
                "cross-node", "across nodes", "between nodes", "different nodes",
                "node to node", "pod to pod", "traffic", "firewall", "vpc", "cni", "nccl"),
    "workload": ("pod spec", "workload", "spec", "manifest", "yaml",
                 "pod definition", "pod template", "my pod"),
    "capacity": ("GPU capacity", "capacity", "not enough gpu", "more gpu", "no free gpu",
                 "out of gpu", "insufficient", "ran out", "quota", "autoscaler", "scale up"),
}  # fmt: skip
# Words that carry no meaning here; negations are kept ("no toleration").
FILLER = frozenset("the a an of its their is are was were be been being has have had s".split())
# One typo is forgiven in a word of at least this many letters (its stem, or as written).
TYPO_LENGTH = 5
# A literal id settles which cause an answer names, above any count of concepts.
ID_SCORE = 1000

_stemmer = snowballstemmer.stemmer("english")
_CONTRACTIONS = ((re.compile(r"\bcan(?:'|’)?t\b"), "can not"),
                 (re.compile(r"\bwon(?:'|’)?t\b"), "will not"),
                 (re.compile(r"\b(do|does|did|is|are|was|were|has|have|had|could|should|would)"
                             r"n(?:'|’)?t\b"), r"\1 not"))  # fmt: skip
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class _Token:
    written: str
    stem: str


def _stem(word: str) -> str:
    """The word's stem; a plural the stemmer keeps (gpus, sgs) loses its s."""
    stem = _stemmer.stemWord(word)
    return stem[:-1] if len(stem) > 3 and stem.endswith("s") and not stem.endswith("ss") else stem


def _tokens(text: str, camel: bool = True) -> list[_Token]:
    """The meaningful words of `text`: camelCase and dotted names split into their words,
    contractions spelt out, filler dropped."""
    if camel:
        text = _CAMEL.sub(" ", text)
    text = text.lower()
    for pattern, spelt in _CONTRACTIONS:
        text = pattern.sub(spelt, text)
    return [_Token(word, _stem(word)) for word in _WORD.findall(text) if word not in FILLER]


@cache
def _phrase(phrase: str) -> tuple[tuple[_Token, ...], ...]:
    """A vocabulary phrase as the token runs it matches: `DaemonSet` as "daemon set" and as
    "daemonset", since people write both."""
    runs = {tuple(_tokens(phrase)), tuple(_tokens(phrase, camel=False))}
    return tuple(run for run in runs if run)


def _one_edit(a: str, b: str) -> bool:
    """`a` and `b` differ by at most one insertion, deletion, substitution or swap."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diffs = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        swap = len(diffs) == 2 and diffs[1] == diffs[0] + 1 and a[diffs[0]] == b[diffs[1]]
        return len(diffs) <= 1 or (swap and a[diffs[1]] == b[diffs[0]])
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _same(said: _Token, known: _Token) -> bool:
    """The learner's word is the vocabulary's word: the same stem, or one typo away in a longer
    word that starts with the same letter (typos rarely hit the first one)."""
    if said.stem == known.stem:
        return True
    if said.written[:1] != known.written[:1]:
        return False
    return (len(known.stem) >= TYPO_LENGTH and _one_edit(said.stem, known.stem)) or (
        len(known.written) > TYPO_LENGTH and _one_edit(said.written, known.written)
    )


def _found_at(words: Sequence[_Token], run: Sequence[_Token]) -> int | None:
    """Where `run` starts in `words`, its words in order with at most one other word between
    two of them ("limit for gpu", "one bad node"); None when it is not there."""

    def rest(at: int, k: int) -> bool:
        if k == len(run):
            return True
        return any(
            _same(words[i], run[k]) and rest(i + 1, k + 1)
            for i in range(at, min(at + 2, len(words)))
        )

    starts = (i for i, word in enumerate(words) if _same(word, run[0]) and rest(i + 1, 1))
    return next(starts, None)


def _group_at(words: Sequence[_Token], group: Sequence[str]) -> int | None:
    """Where the earliest phrase of a concept group is named in `words` (None: not named)."""
    found = [
        at
        for phrase in group
        for run in _phrase(phrase)
        if (at := _found_at(words, run)) is not None
    ]
    return min(found, default=None)


@dataclass(frozen=True)
class Reading:
    """What an answer says, as far as the catalogue's vocabulary goes: the concepts recognised
    (literal ids, then a label per place in the answer, in its order), the causes it names best
    (several on a tie: each gets the benefit of the doubt), and the areas it names."""

    concepts: tuple[str, ...]
    causes: tuple[str, ...]
    areas: tuple[str, ...]


def _mentions_id(lowered: str, ident: str) -> bool:
    return re.search(rf"(?<![a-z0-9-]){re.escape(ident)}(?![a-z0-9-])", lowered) is not None


def read(text: str, catalogue: Mapping[str, Scenario]) -> Reading:
    """Read an answer against every cause of the catalogue."""
    words = _tokens(text)
    lowered = text.lower()
    # The literal ids it names, then one label per place in the answer (the first concept
    # found there).
    ids_named: list[str] = []
    places: dict[int, str] = {}
    scores: dict[str, int] = {}
    for scenario in catalogue.values():
        cause = scenario.cause
        named = [_group_at(words, group) for group in cause.names]
        clues = [_group_at(words, group) for group in cause.clues]
        for group, at in zip((*cause.names, *cause.clues), (*named, *clues), strict=True):
            if at is None:
                continue
            if _group_at(words, group[:1]) == at:  # a group whose label was written here
                places[at] = group[0]
            else:
                places.setdefault(at, group[0])
        ids = [
            i for i in (scenario.name, scenario.doctor_finding) if i and _mentions_id(lowered, i)
        ]
        ids_named += ids
        if ids:
            scores[scenario.name] = ID_SCORE + max(map(len, ids))
        elif all(at is not None for at in named):
            scores[scenario.name] = sum(at is not None for at in (*named, *clues))
    areas = []
    for area, group in AREA_WORDS.items():
        at = _group_at(words, group)
        if at is not None:
            areas.append(area)
            places.setdefault(at, group[0])
    best = max(scores.values(), default=0)
    return Reading(
        concepts=(*ids_named, *(label for _, label in sorted(places.items()))),
        causes=tuple(name for name, score in scores.items() if score == best),
        areas=tuple(areas),
    )


def judge(reading: Reading, scenario: Scenario, catalogue: Mapping[str, Scenario]) -> float:
    """Right when the answer names the fault's cause; the right layer when it names another
    cause of the same area, or no cause but the area; wrong otherwise."""
    if scenario.name in reading.causes:
        return RIGHT
    if reading.causes:
        same_area = any(catalogue[name].area == scenario.area for name in reading.causes)
        return RIGHT_LAYER if same_area else WRONG
    return RIGHT_LAYER if scenario.area in reading.areas else WRONG


def grade(text: str, scenario: Scenario, catalogue: Mapping[str, Scenario]) -> float:
    """The grade of a free answer (or an id) for the fault `scenario`."""
    return judge(read(text, catalogue), scenario, catalogue)


def understood(reading: Reading, catalogue: Mapping[str, Scenario]) -> str:
    """What the grader made of an answer, for a learner whose grade is not right."""
    if not reading.concepts:
        return "understood: nothing the grader knows (name the object or field that is wrong)"
    said = f"understood: {', '.join(reading.concepts)}"
    if reading.causes:
        named = "; ".join(
            f"{catalogue[name].cause.plain} ({name}, area {catalogue[name].area})"
            for name in reading.causes
        )
        return f"{said}; that names: {named}"
    if reading.areas:
        return f"{said}; that names no cause, only the area: {', '.join(reading.areas)}"
    return f"{said}; that names no cause and no area"


def choices(catalogue: Mapping[str, Scenario], exercise: int) -> list[Scenario]:
    """Every cause of the catalogue in an order of its own per exercise: the same exercise
    lists the same order every time, and the list does not give away a fault by its place."""
    order = sorted(catalogue.values(), key=lambda s: s.name)
    random.Random(exercise).shuffle(order)
    return order
