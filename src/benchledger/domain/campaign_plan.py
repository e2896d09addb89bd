"""A campaign's plan: its :class:`Suite` of cases, its :class:`CampaignPolicy` and
the :class:`CampaignPlan` binding the two (every expected work item and its job).

A suite is identified by the sha256 of its canonical manifest, a policy by the
sha256 of its canonical payload (the campaign id derives from it). Pure: no
SQL, no I/O.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import attrs

from benchledger.domain.campaign import (
    CONTENT_TYPE,
    JOB_SCHEMA,
    MAX_CASES,
    MAX_LOCALES,
    MAX_SOURCE_TEXT,
    SUITE_SCHEMA,
    blocked,
    blocks_with,
    campaign_id_for,
    is_identifier,
    is_locale,
    is_text,
    timestamp,
    work_ids_for,
)
from benchledger.domain.campaign_codes import (
    POLICY_INVALID,
    STATE_INVALID,
    SUITE_INVALID,
    SUITE_MISMATCH,
    VALIDITY_EXPIRED,
)
from benchledger.domain.canonical import canonical_json, is_sha256, sha256_json, sha256_text
from benchledger.errors import CampaignBlocked

# -- suite ------------------------------------------------------------------------

_suite_check = blocks_with(SUITE_INVALID)
_CASE_FIELDS = (
    "key",
    "source_id",
    "source_revision",
    "source_text",
    "source_locale",
    "content_type",
)


def _is_source_text(value: Any) -> bool:
    return (
        isinstance(value, str)
        and bool(value.strip())
        and len(value) <= MAX_SOURCE_TEXT
        and is_text(value)
    )


@attrs.frozen
class SuiteCase:
    """One benchmark case: a source text to localize, identified by ``key``."""

    key: str = attrs.field(validator=_suite_check(is_identifier))
    source_id: str = attrs.field(validator=_suite_check(is_identifier))
    source_revision: str = attrs.field(validator=_suite_check(is_identifier))
    source_text: str = attrs.field(validator=_suite_check(_is_source_text), repr=False)
    source_locale: str = attrs.field(validator=_suite_check(is_locale))
    content_type: str = attrs.field(
        default="text/plain",
        validator=_suite_check(lambda v: isinstance(v, str) and CONTENT_TYPE.fullmatch(v)),
    )

    def as_payload(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in _CASE_FIELDS}

    @classmethod
    def from_payload(cls, payload: Any) -> SuiteCase:
        if not isinstance(payload, Mapping) or set(payload) != set(_CASE_FIELDS):
            raise blocked(SUITE_INVALID)
        return cls(**{name: payload[name] for name in _CASE_FIELDS})


def _cases(value: Iterable[SuiteCase]) -> tuple[SuiteCase, ...]:
    if isinstance(value, str | bytes | Mapping):
        raise blocked(SUITE_INVALID)
    try:
        return tuple(value)
    except TypeError:
        raise blocked(SUITE_INVALID) from None


def _valid_cases(_instance: Any, _attribute: Any, cases: tuple[SuiteCase, ...]) -> None:
    if not 1 <= len(cases) <= MAX_CASES or not all(isinstance(c, SuiteCase) for c in cases):
        raise blocked(SUITE_INVALID)
    if len({case.key for case in cases}) != len(cases):
        raise blocked(SUITE_INVALID)


@attrs.frozen
class Suite:
    """An ordered set of cases; identified by the sha256 of its canonical manifest."""

    cases: tuple[SuiteCase, ...] = attrs.field(converter=_cases, validator=_valid_cases)
    _by_key: dict[str, SuiteCase] = attrs.field(init=False, repr=False, eq=False, hash=False)
    _sha256: str = attrs.field(init=False, repr=False, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_by_key", {case.key: case for case in self.cases})
        object.__setattr__(self, "_sha256", _manifest_sha256(self.cases))

    def manifest(self) -> dict[str, Any]:
        return {"schema": SUITE_SCHEMA, "cases": [case.as_payload() for case in self.cases]}

    @property
    def sha256(self) -> str:
        return self._sha256

    def case(self, key: str) -> SuiteCase | None:
        return self._by_key.get(key)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(case.key for case in self.cases)

    @classmethod
    def from_manifest(cls, manifest: Any) -> Suite:
        return cls(_manifest_cases(manifest))

    @classmethod
    def from_canonical_text(cls, text: Any) -> Suite:
        """The suite whose canonical manifest is exactly ``text`` (a stored suite).

        The text is parsed once and the parsed manifest let go before the suite's
        sha256 is computed: a large suite never has two parsed copies at once. The
        suite's sha256 (of its canonical manifest) equal to the text's proves the
        text canonical; anything else raises ``suite_invalid``.
        """
        if not isinstance(text, str):
            raise blocked(SUITE_INVALID)
        try:
            manifest = json.loads(text)
        except (ValueError, RecursionError):
            raise blocked(SUITE_INVALID) from None
        cases = _manifest_cases(manifest)
        del manifest
        suite = cls(cases)
        if suite.sha256 != sha256_text(text):
            raise blocked(SUITE_INVALID)
        return suite


def _manifest_cases(manifest: Any) -> tuple[SuiteCase, ...]:
    if (
        not isinstance(manifest, Mapping)
        or set(manifest) != {"schema", "cases"}
        or manifest["schema"] != SUITE_SCHEMA
        or not isinstance(manifest["cases"], list | tuple)
    ):
        raise blocked(SUITE_INVALID)
    return tuple(SuiteCase.from_payload(item) for item in manifest["cases"])


#: Cases encoded at a time when a suite's sha256 is computed.
_HASH_BATCH: Final = 512


def _manifest_sha256(cases: tuple[SuiteCase, ...]) -> str:
    """``sha256_json(Suite(cases).manifest())``, a batch of cases at a time.

    The canonical manifest is ``{"cases":[case,case,...],"schema":"..."}`` (keys
    sorted, no white space), so its text is each batch's canonical list without
    its brackets, joined by commas: a large suite is hashed without building
    its whole manifest and text (tests/campaign/test_domain.py compares the two).
    """
    digest = hashlib.sha256(b'{"cases":[')
    for start in range(0, len(cases), _HASH_BATCH):
        if start:
            digest.update(b",")
        batch = canonical_json([case.as_payload() for case in cases[start : start + _HASH_BATCH]])
        digest.update(batch[1:-1].encode("utf-8"))
    digest.update(f'],"schema":{canonical_json(SUITE_SCHEMA)}}}'.encode())
    return digest.hexdigest()


# -- policy -----------------------------------------------------------------------

_policy_check = blocks_with(POLICY_INVALID)
_POLICY_FIELDS = (
    "suite_sha256",
    "required_locales",
    "valid_until",
    "candidate_provider_id",
    "candidate_model_id",
    "candidate_model_version",
    "candidate_software_version",
    "candidate_glossary_version",
    "candidate_policy_version",
)


def _locales(value: Any) -> tuple[str, ...]:
    if isinstance(value, str | bytes | Mapping):
        raise blocked(POLICY_INVALID)
    try:
        return tuple(value)
    except TypeError:
        raise blocked(POLICY_INVALID) from None


def _valid_locales(_instance: Any, _attribute: Any, value: tuple[str, ...]) -> None:
    if (
        not 1 <= len(value) <= MAX_LOCALES
        or not all(is_locale(locale) for locale in value)
        or len(set(value)) != len(value)
    ):
        raise blocked(POLICY_INVALID)


def _valid_until(value: Any) -> float:
    try:
        return timestamp(value)
    except CampaignBlocked:
        raise blocked(POLICY_INVALID) from None


@attrs.frozen
class CampaignPolicy:
    """What a campaign measures: a suite (by hash), locales, validity, the candidate.

    Its canonical payload is the policy binding, so its sha256 (and the
    campaign id derived from it) matches campaigns the legacy store created.
    """

    suite_sha256: str = attrs.field(validator=_policy_check(is_sha256))
    required_locales: tuple[str, ...] = attrs.field(converter=_locales, validator=_valid_locales)
    valid_until: float = attrs.field(converter=_valid_until)
    candidate_provider_id: str = attrs.field(validator=_policy_check(is_identifier))
    candidate_model_id: str = attrs.field(validator=_policy_check(is_identifier))
    candidate_model_version: str = attrs.field(validator=_policy_check(is_identifier))
    candidate_software_version: str = attrs.field(validator=_policy_check(is_identifier))
    candidate_glossary_version: str = attrs.field(validator=_policy_check(is_identifier))
    candidate_policy_version: str = attrs.field(validator=_policy_check(is_identifier))
    _sha256: str = attrs.field(init=False, repr=False, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_sha256", sha256_json(self.as_payload()))

    def as_payload(self) -> dict[str, Any]:
        payload = {name: getattr(self, name) for name in _POLICY_FIELDS}
        payload["required_locales"] = list(self.required_locales)
        return payload

    @property
    def sha256(self) -> str:
        return self._sha256

    @property
    def campaign_id(self) -> str:
        return campaign_id_for(self._sha256)

    def candidate(self) -> dict[str, str]:
        return {
            "provider_id": self.candidate_provider_id,
            "model_id": self.candidate_model_id,
            "model_version": self.candidate_model_version,
            "software_version": self.candidate_software_version,
            "glossary_version": self.candidate_glossary_version,
            "policy_version": self.candidate_policy_version,
        }

    def is_current(self, now: float) -> bool:
        return now <= self.valid_until

    def require_current(self, now: float) -> None:
        if not self.is_current(now):
            raise blocked(VALIDITY_EXPIRED)

    @classmethod
    def from_payload(cls, payload: Any) -> CampaignPolicy:
        if not isinstance(payload, Mapping) or set(payload) != set(_POLICY_FIELDS):
            raise blocked(POLICY_INVALID)
        if not isinstance(payload["required_locales"], list | tuple):
            raise blocked(POLICY_INVALID)
        return cls(**{name: payload[name] for name in _POLICY_FIELDS})


# -- a campaign's plan: policy x suite -------------------------------------------------


@attrs.frozen
class PlannedWork:
    work_id: str
    target_locale: str
    suite_case_key: str


_work_ids = functools.lru_cache(maxsize=64)(work_ids_for)


@attrs.frozen
class CampaignPlan:
    """A verified policy/suite pair and everything derived from it (pure)."""

    policy: CampaignPolicy
    suite: Suite

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.policy, CampaignPolicy):
            raise blocked(POLICY_INVALID)
        if not isinstance(self.suite, Suite):
            raise blocked(SUITE_INVALID)
        if self.suite.sha256 != self.policy.suite_sha256:
            raise blocked(SUITE_MISMATCH)

    @property
    def campaign_id(self) -> str:
        return self.policy.campaign_id

    def _work_ids(self) -> Callable[[str, str], str]:
        """``work_id_for`` of this plan's items (validated strings: the fast encoding)."""
        return _work_ids(self.campaign_id, self.policy.sha256, self.suite.sha256)

    @property
    def work_count(self) -> int:
        return len(self.policy.required_locales) * len(self.suite.cases)

    def work(self) -> Iterator[PlannedWork]:
        """Every expected item, in plan order (locale, then manifest order)."""
        work_id = self._work_ids()
        for locale in self.policy.required_locales:
            for case in self.suite.cases:
                yield PlannedWork(
                    work_id(locale, case.key),
                    locale,
                    case.key,
                )

    def job_payload(self, target_locale: str, case_key: str) -> dict[str, Any]:
        """The job a worker runs for one item, rebuilt from the stored policy and suite.

        Raises ``state_invalid`` when the item is not part of this plan.
        """
        case = self.suite.case(case_key)
        if case is None or target_locale not in self.policy.required_locales:
            raise blocked(STATE_INVALID)
        campaign_id = self.campaign_id
        return {
            "schema": JOB_SCHEMA,
            "campaign_id": campaign_id,
            "work_id": self._work_ids()(target_locale, case_key),
            "policy_sha256": self.policy.sha256,
            "suite_sha256": self.suite.sha256,
            "suite_case_key": case.key,
            "target_locale": target_locale,
            "source": {
                "id": case.source_id,
                "revision": case.source_revision,
                "text": case.source_text,
                "locale": case.source_locale,
                "content_type": case.content_type,
            },
            "candidate": self.policy.candidate(),
        }
