"""The integrity audit's rules over item rows (pure).

The service fetches rows and feeds them here; nothing here touches a database.
A row is anything with the columns of :data:`ITEM_COLUMNS` as attributes and in
that order as a tuple (a SQLAlchemy ``Row`` in practice, :class:`ItemRow` in tests).

Every item goes through :func:`check_item`, the rule. A batch of items whose
rows are all clean may instead be proved clean at once by :func:`clean_batch`:
column-wise checks run by the interpreter's C loops (counts, type sets,
``map`` of ``sha256`` over the texts, seals and work ids). It accepts a batch
only when :func:`check_item` would find nothing in any of its rows, and takes
the same account of it; any doubt and the batch goes row by row through
:func:`check_item`, so what is reported never depends on which way a batch took.

Whether a stored result is canonical JSON the default verifier accepts, for
its own item, is proved without parsing when it has the default shape (see
:class:`ResultShape`): its text is then fully determined by its item, its
score and its ``passed``. Other results are parsed a batch at a time and
re-encoded one by one (canonical form), then given to the configured verifier.

The report's rules against the items, and health's, are in
:mod:`~benchledger.domain.campaign_health`.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import re
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, Final, NamedTuple, overload

import attrs

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import WorkStatus
from benchledger.domain.campaign_results import result_identity
from benchledger.domain.canonical import CanonicalJsonError, sha256_text
from benchledger.domain.integrity import (
    SEAL_FORMAT,
    Problem,
    ProblemLog,
    ResultsDigest,
    is_time,
    item_state_ok,
    parse_stored_json,
    result_seal,
    work_id_maker,
)

ITEM_COLUMNS: Final = (
    "work_id",
    "target_locale",
    "suite_case_key",
    "status",
    "attempts",
    "max_attempts",
    "next_attempt_at",
    "lease_owner",
    "lease_token",
    "lease_expires_at",
    "last_error_code",
    "last_error_detail_hash",
    "result_json",
    "result_sha256",
    "created_at",
    "updated_at",
    "result_seal",
)


class ItemRow(NamedTuple):
    """A work item row as the audit reads it (the columns of :data:`ITEM_COLUMNS`)."""

    work_id: Any
    target_locale: Any
    suite_case_key: Any
    status: Any
    attempts: Any
    max_attempts: Any
    next_attempt_at: Any
    lease_owner: Any
    lease_token: Any
    lease_expires_at: Any
    last_error_code: Any
    last_error_detail_hash: Any
    result_json: Any
    result_sha256: Any
    created_at: Any
    updated_at: Any
    result_seal: Any


# Text that json.dumps(ensure_ascii=False) writes as itself between quotes.
_PLAIN = re.compile('[^"\\\\\x00-\x1f]*')
_DUMPS = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
).encode
_SHA256 = hashlib.sha256
_HEX = type(hashlib.sha256()).hexdigest
_ENCODE = str.encode
_INF = math.inf


def _braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


@attrs.frozen
class ResultShape:
    """The default shape of a result: the structural verifier's keys and nothing else.

    ``{"passed":B,"score":S,"suite":{"case_key":K,"suite_sha256":H},"target_locale":L}``
    (``passed`` optional). For an item (L, K) of a plan whose locales and case keys
    are plain text, a stored text of this form is canonical JSON exactly when S is a
    canonical JSON number; the default verifier accepts it exactly when S is in
    [0, 1] (and then it is for its own item). So no such text needs parsing.
    """

    pattern: re.Pattern[str]

    @classmethod
    def for_suite(cls, suite_sha256: str) -> ResultShape:
        text = '[^"\\\\\x00-\x1f]*'
        return cls(
            re.compile(
                r'^\{(?:"passed":(true|false),)?"score":([-+.0-9eE]{1,40}),"suite":\{"case_key":"('
                + text
                + r')","suite_sha256":"'
                + re.escape(suite_sha256)
                + r'"\},"target_locale":"('
                + text
                + r')"\}$',
                re.MULTILINE,
            )
        )

    def scores(
        self,
        texts: Sequence[str],
        locales: Sequence[Any],
        keys: Sequence[Any],
        known: dict[str, Any],
        collect: bool,
    ) -> Any:
        """(scores, passed) of every text, when each is the default shape for its item.

        ``None`` when one is not (or its score is not a canonical number in [0, 1]).
        ``known`` maps score texts already proved to their values (across batches).
        Without ``collect``, only whether they all are (``((), ())``).
        """
        joined = "\n".join(texts)  # a canonical text holds no raw line break
        if joined.count("\n") != len(texts) - 1:
            return None
        found = self.pattern.findall(joined)
        if len(found) != len(texts):
            return None
        passed, numbers, found_keys, found_locales = zip(*found, strict=True)
        if found_keys != tuple(keys) or found_locales != tuple(locales):
            return None
        if len(known) > _KNOWN_SCORES:
            known.clear()
        for number in set(numbers).difference(known):
            value = _score(number)
            if value is None:
                return None
            known[number] = value
        if not collect:
            return (), ()
        return list(map(known.__getitem__, numbers)), list(map(_PASSED.__getitem__, passed))


_KNOWN_SCORES: Final = 4096
_PASSED: Final = {"": None, "true": True, "false": False}


def _score(text: str) -> Any:
    """The value of ``text`` if it is a canonical JSON number in [0, 1], else ``None``."""
    try:
        value = json.loads(text)
        if type(value) not in (int, float) or _DUMPS(value) != text or not 0 <= value <= 1:
            return None
    except ValueError:
        return None
    return value


@attrs.frozen
class ItemPlan:
    """What the items of a campaign must be: its plan's locales, case keys and work ids."""

    campaign_id: str
    locales: frozenset[str]
    keys: frozenset[str]
    make_id: Callable[[str, str], str]
    # The work id text as a format of (case key, locale), when every key and locale is plain.
    id_format: Callable[[Any, Any], str] | None
    shape: ResultShape | None
    sorted_locales: tuple[str, ...] = ()
    sorted_keys: tuple[str, ...] = ()
    ids: PlanIds = attrs.field(factory=lambda: PlanIds())

    def contiguous_ids(self, first: tuple[Any, Any], last: tuple[Any, Any], count: int) -> Any:
        """The work ids of the plan's items ``first`` to ``last`` (in code-point order),
        joined, when they are ``count`` items; else ``None``.

        ``first`` and ``last`` are items of the plan.
        """
        if self.id_format is None:
            return None
        per_locale = len(self.sorted_keys)
        start = bisect_left(self.sorted_locales, first[0]) * per_locale + bisect_left(
            self.sorted_keys, first[1]
        )
        end = bisect_left(self.sorted_locales, last[0]) * per_locale + bisect_left(
            self.sorted_keys, last[1]
        )
        if end - start + 1 != count:
            return None
        if per_locale * len(self.sorted_locales) > MAX_KEPT_IDS:
            # Too many to keep: this batch's ids only (item i is locale i // per_locale,
            # key i % per_locale), so the audit's memory does not grow with the items.
            keys, locales = self.sorted_keys, self.sorted_locales
            return self._hashed_ids(
                [(keys[i % per_locale], locales[i // per_locale]) for i in range(start, end + 1)]
            )
        text = self.ids.text
        if text is None:
            pairs = [(k, loc) for loc in self.sorted_locales for k in self.sorted_keys]
            text = self.ids.build(self._hashed_ids(pairs))
        return text[start * _WORK_ID_LENGTH : (end + 1) * _WORK_ID_LENGTH]

    def _hashed_ids(self, pairs: Sequence[tuple[Any, Any]]) -> str:
        assert self.id_format is not None
        texts = map(self.id_format, *zip(*pairs, strict=True)) if pairs else iter(())
        hexes = map(_HEX, map(_SHA256, map(_ENCODE, texts)))
        return dom.WORK_PREFIX + dom.WORK_PREFIX.join(hexes)

    @classmethod
    def build(
        cls,
        campaign_id: str,
        policy_sha256: str,
        suite_sha256: str,
        locales: Sequence[str],
        keys: Sequence[str],
        *,
        default_shape: bool,
    ) -> ItemPlan:
        """``default_shape``: the configured verifier is the default structural one."""
        plain = all(_PLAIN.fullmatch(value) for value in (*locales, *keys))
        id_format = None
        if plain:
            head = (
                '{"campaign_id":'
                + json.dumps(campaign_id, ensure_ascii=False)
                + ',"policy_sha256":'
                + json.dumps(policy_sha256, ensure_ascii=False)
                + ',"suite_case_key":"'
            )
            middle = (
                '","suite_sha256":'
                + json.dumps(suite_sha256, ensure_ascii=False)
                + ',"target_locale":"'
            )
            id_format = (_braces(head) + "{}" + _braces(middle) + '{}"}}').format
        return cls(
            campaign_id,
            frozenset(locales),
            frozenset(keys),
            work_id_maker(campaign_id, policy_sha256, suite_sha256),
            id_format,
            ResultShape.for_suite(suite_sha256) if plain and default_shape else None,
            tuple(sorted(set(locales))),
            tuple(sorted(set(keys))),
        )


_WORK_ID_LENGTH: Final = len(dom.WORK_PREFIX) + 64
#: The most items of a plan whose work ids are kept between audits, as one text (about
#: 80 bytes each: 8 MB); a larger plan's are derived batch by batch as the items stream.
MAX_KEPT_IDS: Final = 100_000
# Plans whose every work id is kept as one text (each about 80 bytes per item).
_PLANS_WITH_IDS: Final = 4
_with_ids: deque[PlanIds] = deque()


class PlanIds:
    """Every work id of a plan as one text, derived once (for the last few plans used)."""

    def __init__(self) -> None:
        self.text: str | None = None

    def build(self, text: str) -> str:
        self.text = text
        _with_ids.append(self)
        while len(_with_ids) > _PLANS_WITH_IDS:
            _with_ids.popleft().text = None
        return text


ResultCheck = Callable[[Mapping[str, Any]], None]
"""Runs the configured result verifier on one parsed result (raises to reject)."""


class ItemTally:
    """What the audit learns from the items, row after row (and batch after batch)."""

    def __init__(self, collect: bool) -> None:
        self.seen = 0
        self.expected = 0
        self.succeeded = 0
        self.previous: tuple[Any, Any] | None = None
        self.digest = ResultsDigest()
        # The results' digest as the report builder computes it (of each text's own
        # sha256); the stored digests fed to ``digest`` may differ from it.
        self.texts_match_digests = True
        self.collect = collect
        self.known_scores: dict[str, Any] = {}
        self.kept_bytes = 0
        self.texts: list[str] = []
        self.locales: list[Any] = []
        self.scores: list[Any] = []
        self.passed: list[Any] = []

    def keep(self, texts: Sequence[str], locales: Sequence[Any], scores: Any, passed: Any) -> None:
        self.kept_bytes += sum(map(len, texts))
        self.texts.extend(texts)
        self.locales.extend(locales)
        self.scores.extend(scores)
        self.passed.extend(passed)

    def drop(self) -> None:
        """Too much to keep: the report check reads the results again."""
        self.collect = False
        self.texts, self.locales, self.scores, self.passed = [], [], [], []


def check_item(
    row: Any,
    plan: ItemPlan | None,
    budget: Any,
    limit: float,
    log: ProblemLog,
    tally: ItemTally,
    check_result: ResultCheck | None,
) -> Any:
    """Every check of one item row; problems go to ``log``. The parsed result, if kept.

    ``plan`` is ``None`` when the campaign's plan could not be read (then the work
    ids are not checked); ``check_result`` ``None`` likewise skips the verifier.
    """
    tally.seen += 1
    work_id = row.work_id
    subject = work_id if isinstance(work_id, str) else "item"
    locale, case_key = row.target_locale, row.suite_case_key
    if plan is not None:
        if (
            locale in plan.locales
            and case_key in plan.keys
            and (locale, case_key) != tally.previous
            and work_id == plan.make_id(locale, case_key)
        ):
            tally.expected += 1
        else:
            log.add(Problem.ITEM_UNEXPECTED, subject)
    tally.previous = (locale, case_key)
    if not item_state_ok(row):
        log.add(Problem.ITEM_STATE, subject)
    if row.max_attempts != budget:
        log.add(Problem.ATTEMPT_BUDGET, subject)
    if is_time(row.updated_at) and row.updated_at > limit:
        log.add(Problem.FUTURE_TIME, subject)
    if row.status != WorkStatus.SUCCEEDED:
        tally.digest.valid = False
        return None
    tally.succeeded += 1
    text, result_sha256 = row.result_json, row.result_sha256
    if not isinstance(text, str):
        tally.digest.valid = False
        return None
    if result_sha256 != sha256_text(text):
        log.add(Problem.RESULT_HASH, subject)
        tally.texts_match_digests = False
    if row.result_seal != result_seal(
        str(work_id), row.attempts, row.max_attempts, str(result_sha256)
    ):
        log.add(Problem.RESULT_SEAL, subject)
    tally.digest.add(result_sha256)
    try:
        value = parse_stored_json(text)
        if not isinstance(value, dict):
            raise CanonicalJsonError("a result is a JSON object")
        if check_result is not None:
            check_result(value)
        if result_identity(value) != (locale, case_key):
            raise CanonicalJsonError("the result is for another item")
    except Exception:
        log.add(Problem.RESULT_INVALID, subject)
        tally.digest.valid = False
        return None
    if tally.collect:
        tally.keep((text,), (locale,), (value.get("score"),), (value.get("passed"),))
    return value


def clean_batch(
    rows: Sequence[Any],
    plan: ItemPlan,
    budget: Any,
    limit: float,
    tally: ItemTally,
    check_result: ResultCheck | None,
) -> bool:
    """Account for a batch of succeeded, clean items at once; ``False`` (nothing
    accounted) when a row may show a problem: check those rows with :func:`check_item`.
    """
    try:
        found = _clean_batch(rows, plan, budget, limit, check_result, tally)
    except Exception:
        return False
    if found is None:
        return False
    texts, locales, keys, digests, scores, passed = found
    count = len(rows)
    tally.seen += count
    tally.expected += count
    tally.succeeded += count
    tally.previous = (locales[-1], keys[-1])
    tally.digest.extend(digests)
    if tally.collect:
        tally.keep(texts, locales, scores, passed)
    return True


def _clean_batch(
    rows: Sequence[Any],
    plan: ItemPlan,
    budget: Any,
    limit: float,
    check_result: ResultCheck | None,
    tally: ItemTally,
) -> Any:
    count = len(rows)
    if not count or plan.id_format is None:
        return None
    (
        work_ids,
        locales,
        keys,
        statuses,
        attempts,
        maxima,
        next_times,
        owners,
        tokens,
        expiries,
        codes,
        details,
        texts,
        digests,
        created,
        updated,
        seals,
    ) = zip(*rows, strict=True)
    # item_state_ok's succeeded case, and the budget and the clock, for every row
    if not (
        statuses.count(WorkStatus.SUCCEEDED) == count
        and maxima.count(budget) == count
        and owners.count(None) == count
        and tokens.count(None) == count
        and expiries.count(None) == count
        and codes.count(None) == count
        and details.count(None) == count
        and set(map(type, attempts + maxima)) == {int}
        and set(map(type, created + updated + next_times)) == {float}
        and set(map(type, texts)) == {str}
        and type(budget) is int
        and budget <= dom.MAX_ATTEMPTS
        and min(attempts) >= 1
        and all(map(operator.le, attempts, maxima))
        and all(map(operator.le, repeat(0.0), created))
        and all(map(operator.le, created, updated))
        and all(map(operator.le, updated, repeat(min(limit, _INF))))
        and all(map(operator.lt, updated, repeat(_INF)))
        and all(map(operator.le, repeat(0.0), next_times))
        and all(map(operator.lt, next_times, repeat(_INF)))
    ):
        return None
    # the plan's items, each once, in order, under its own work id
    if not (set(locales) <= plan.locales and set(keys) <= plan.keys):
        return None
    pairs = list(zip(locales, keys, strict=True))
    if pairs[0] == tally.previous or not all(map(operator.lt, pairs, pairs[1:])):
        return None
    if set(map(len, work_ids)) != {_WORK_ID_LENGTH}:
        return None
    expected_ids = plan.contiguous_ids(pairs[0], pairs[-1], count)
    if expected_ids is None:  # not a run of the plan's items: each id derived
        expected_ids = plan._hashed_ids(list(zip(keys, locales, strict=True)))
    if "".join(work_ids) != expected_ids:
        return None
    # each text is its digest, and each seal binds its work id, attempts, budget and digest
    if list(map(_HEX, map(_SHA256, map(_ENCODE, texts)))) != list(digests):
        return None
    seal_texts = map(SEAL_FORMAT.format, work_ids, attempts, maxima, digests)
    if list(map(_HEX, map(_SHA256, map(_ENCODE, seal_texts)))) != list(seals):
        return None
    # each text is canonical JSON, accepted by the verifier, for its own item
    scored = None
    if plan.shape is not None:
        scored = plan.shape.scores(texts, locales, keys, tally.known_scores, tally.collect)
    if scored is None:
        scored = _parsed_scores(texts, locales, keys, check_result)
        if scored is None:
            return None
    return texts, locales, keys, digests, scored[0], scored[1]


def _parsed_scores(
    texts: Sequence[str],
    locales: Sequence[Any],
    keys: Sequence[Any],
    check_result: ResultCheck | None,
) -> Any:
    """(scores, passed) of results that parse a batch at a time, else ``None``."""
    count = len(texts)
    values = json.loads("[" + ",".join(texts) + "]")
    if len(values) != count or set(map(type, values)) != {dict}:
        return None
    if list(map(_DUMPS, values)) != list(texts):  # each text is its value's canonical JSON
        return None
    brackets = map(
        operator.add, map(str.count, texts, repeat("{")), map(str.count, texts, repeat("["))
    )
    if max(brackets) > 64:
        return None  # the nesting limit: row by row
    for value, locale, key in zip(values, locales, keys, strict=True):
        if check_result is not None:
            check_result(value)
        if result_identity(value) != (locale, key):
            return None
    scores = list(map(dict.get, values, repeat("score")))
    passed = list(map(dict.get, values, repeat("passed")))
    return scores, passed


class VerifiedResults(Sequence[Mapping[str, Any]]):
    """A campaign's results as the audit verified them, in (locale, case key) order.

    Each result is parsed from its (canonical) text when asked for. A report
    builder may instead read the columns it needs: ``locales``, ``scores`` and
    ``passed`` (each result's ``target_locale``, ``score`` and ``passed``, ``None``
    when absent), and ``results_sha256``, the digest of the texts' own sha256s.
    """

    def __init__(
        self,
        texts: list[str],
        locales: list[Any],
        scores: list[Any],
        passed: list[Any],
        results_sha256: str | None,
    ) -> None:
        self.texts = texts
        self.locales = locales
        self.scores = scores
        self.passed = passed
        self.results_sha256 = results_sha256

    def __len__(self) -> int:
        return len(self.texts)

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return map(json.loads, self.texts)

    @overload
    def __getitem__(self, index: int) -> Mapping[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Mapping[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [json.loads(text) for text in self.texts[index]]
        return json.loads(self.texts[index])


def verified_results(tally: ItemTally) -> VerifiedResults | None:
    """The kept results of a tally, or ``None`` when they were not kept."""
    if not tally.collect:
        return None
    digest = tally.digest.hexdigest() if tally.texts_match_digests else None
    return VerifiedResults(tally.texts, tally.locales, tally.scores, tally.passed, digest)
