"""Experiment studies: the vocabulary, input rules and a study's definition.

A study is a finite :class:`Budget` (four natural-number dimensions) plus a
content-addressed :class:`SelectionPolicy`. Trials are immutable members, each
bound to one recipe material (:class:`~benchledger.domain.study_runs.MaterialRef`)
and a replicate number. Each admission reserves a conservative charge (the
material's resource envelope) for one run attempt; reconciliation settles
reservations from run state but keeps the worst-case charge.

Here: limits, refusals, the input rules, request digests, the enums, the
budget and the selection policy. Materials and runs are in
:mod:`~benchledger.domain.study_runs`, what reads and writes return in
:mod:`~benchledger.domain.study_views`, the receipt codec in
:mod:`~benchledger.domain.study_documents`.

Everything here is pure: no SQL, no I/O, no clock. Bad input raises
:class:`~benchledger.errors.StudyError` with its category.
"""

from __future__ import annotations

import enum
import re
import typing
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import attrs

from benchledger.domain.canonical import (
    CanonicalJsonError,
    canonical_json,
    is_sha256,
    sha256_json,
    sha256_text,
)
from benchledger.errors import StudyError

# -- limits of the model -----------------------------------------------------------

#: Budget dimensions, in their fixed order.
DIMENSIONS: tuple[str, ...] = (
    "attempt_slots",
    "admitted_wall_seconds",
    "retained_bytes",
    "peak_staging_bytes",
)
#: Largest natural number stored (a signed 64-bit column).
MAX_NATURAL = 2**63 - 1
MAX_MEMBERS = 10_000
MAX_CAPABILITIES = 64
MAX_NAME_LENGTH = 200
MAX_STUDY_PAGE = 100
MAX_LIST_PAGE = 20
DEFAULT_GRANT_TTL_SECONDS = 600
MAX_GRANT_TTL_SECONDS = 7 * 24 * 3600
#: The largest study document (a recipe, evidence, a receipt), as canonical JSON in UTF-8.
MAX_DOCUMENT_BYTES = 1_048_576

POLICY_FORMAT = "selection_policy_v1"
TIE_BREAK = "trial_id"
CANDIDATE_DECISION = "diagnostic"
CANDIDATE_LIMITATIONS: tuple[str, ...] = (
    "Validation diagnostics only; no quality threshold or physical acceptance is qualified.",
)

_E = TypeVar("_E", bound=enum.Enum)

_IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
_REQUEST_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{7,127}$")
#: What free text (names, units, capabilities) never holds: control (Cc), format
#: (Cf: bidi overrides, zero-width characters), lone surrogates (Cs), line and
#: paragraph separators (Zl, Zp).
_NOT_IN_TEXT = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
#: How much of a refused value a message quotes.
_QUOTED_CHARACTERS = 40


# -- refusals ------------------------------------------------------------------------

#: Every refusal but bad input is a 409, ``not_found`` a 404, ``forbidden`` a 403 (the table).
CATEGORY_STATUS: dict[str, int] = {
    "invalid": 400,
    "forbidden": 403,
    "not_found": 404,
    "stale": 409,
    "conflict": 409,
    "incompatible": 409,
    "unsupported": 409,
    "unavailable": 409,
}


def refuse(message: str, code: str = "invalid") -> StudyError:
    """A :class:`StudyError` with its category and HTTP-like status."""
    return StudyError(message, code, CATEGORY_STATUS[code])


# -- input rules ---------------------------------------------------------------------


def natural(value: object, label: str, minimum: int = 0, maximum: int = MAX_NATURAL) -> int:
    """``value`` as an ``int`` in ``[minimum, maximum]`` (``bool`` is refused)."""
    if type(value) is not int or not minimum <= value <= maximum:
        raise refuse(f"{label} must be an integer from {minimum} to {maximum}.")
    return value


def identifier(value: object, label: str = "Identifier") -> str:
    if not isinstance(value, str) or _IDENTIFIER.fullmatch(value) is None:
        raise refuse(f"{label} must be 1-128 letters, digits or '_.:@-'.")
    return value


def request_key(value: object) -> str:
    if not isinstance(value, str) or _REQUEST_KEY.fullmatch(value) is None:
        raise refuse("Request key requires 8-128 supported characters.")
    return value


def sha256_hex(value: object, label: str) -> str:
    if not is_sha256(value):
        raise refuse(f"{label} must be a lowercase hex sha256.")
    return typing.cast(str, value)


def _plain_text(value: str) -> bool:
    # Fast path: printable text holds no "Other" (C*) and no separator but the space.
    if value.isprintable():
        return True
    return not any(unicodedata.category(char) in _NOT_IN_TEXT for char in value)


def text(value: object, label: str, max_length: int = MAX_NAME_LENGTH) -> str:
    """1-``max_length`` characters, not all blank, without control or format characters."""
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > max_length
        or not _plain_text(value)
    ):
        raise refuse(f"{label} must be 1-{max_length} characters of text.")
    return value


def describe(value: object) -> str:
    """A short, safe description of a refused value for a message.

    Text is quoted (escaped to ASCII, at most 40 characters); anything else is
    named by its type only. Never the value's own ``repr``: that may be huge,
    recurse without end or run the caller's code.
    """
    if isinstance(value, str):
        quoted = ascii(value[:_QUOTED_CHARACTERS])
        return quoted + ("..." if len(value) > _QUOTED_CHARACTERS else "")
    return f"a value of type {type(value).__name__}"


def bounded_json(value: object, label: str) -> str:
    """The canonical JSON of a study document, at most 1 MiB (``invalid`` otherwise)."""
    try:
        encoded = canonical_json(value)
    except CanonicalJsonError as error:
        raise refuse(f"{label} is not canonical JSON data: {error}.") from None
    if len(encoded) > MAX_DOCUMENT_BYTES or len(encoded.encode("utf-8")) > MAX_DOCUMENT_BYTES:
        raise refuse(f"{label} exceeds {MAX_DOCUMENT_BYTES} bytes of canonical JSON.")
    return encoded


def boolean(value: object, label: str) -> bool:
    """``value`` as a ``bool`` (``0``, ``1`` and strings are refused)."""
    if not isinstance(value, bool):
        raise refuse(f"{label} must be true or false.")
    return value


def page_limit(value: object, maximum: int) -> int:
    return natural(value, "Page limit", 1, maximum)


def field_check(check: typing.Callable[[object, str], object]) -> Any:
    """An attrs validator running ``check(value, field name)`` (which refuses bad input)."""

    def validate(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        check(value, attribute.name)

    return validate


def _natural_field(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    natural(value, attribute.name.replace("_", " ").capitalize())


def as_enum(kind: type[_E], value: object, label: str) -> _E:
    """``value`` (a member or its text) as a member of ``kind``; anything else is ``invalid``."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    raise refuse(f"Unsupported {label}: {describe(value)}.")


# -- request digests -------------------------------------------------------------------

#: Version of the document :func:`request_sha256` hashes; part of every stored digest.
REQUEST_DIGEST_VERSION = 1


def request_sha256(operation: str, study_id: str | None, body: Mapping[str, Any]) -> str:
    """The digest a write's request key is bound to (its idempotency identity).

    The sha256 of the canonical JSON of ``{"operation": operation, "version": 1,
    "study_id": study_id, "body": body}``, where ``body`` holds the write's
    inputs (for ``studies.admit``: ``revision``, ``admission_epoch``,
    ``trial_id``, ``approval_id``, ``parent_run_id``). ``study_id`` is ``None``
    for writes that create a study.

    Every idempotent :class:`~benchledger.StudyService` write stores it with
    its receipt (and an admission with its reservation and run, as
    ``request_sha256``): replaying a request key with the same digest returns
    the stored receipt, and with another digest is a ``conflict``. Changing
    this function changes every stored digest, so it is versioned.

    Refuses (``invalid``) an ``operation`` that is not text, a ``study_id``
    that is not an identifier, or a ``body`` that is not a JSON object.
    """
    if not isinstance(operation, str) or not operation:
        raise refuse("Request operation must be text.")
    if study_id is not None:
        identifier(study_id, "Study id")
    if not isinstance(body, Mapping):
        raise refuse("Request body must be a mapping.")
    document = {
        "operation": operation,
        "version": REQUEST_DIGEST_VERSION,
        "study_id": study_id,
        "body": dict(body),
    }
    return sha256_text(bounded_json(document, "Request body"))


# -- enumerations ----------------------------------------------------------------------


class StudyState(enum.StrEnum):
    DRAFT = "draft"
    OPEN = "open"
    STOPPING = "stopping"
    STOPPED = "stopped"
    UNKNOWN = "unknown"


class ReservationState(enum.StrEnum):
    RESERVED = "reserved"
    RUNNING = "running"
    SETTLED = "settled"
    UNKNOWN = "unknown"


class RunState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"


ACTIVE_RUN_STATES = frozenset({RunState.QUEUED, RunState.RUNNING, RunState.CANCELLING})
TERMINAL_RUN_STATES = frozenset(
    {RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED, RunState.INTERRUPTED}
)
#: A retry's parent must have ceased in one of these states.
RETRY_PARENT_STATES = frozenset({RunState.FAILED, RunState.CANCELLED, RunState.INTERRUPTED})


class CheckpointRule(enum.StrEnum):
    SELECTED = "selected"
    LAST = "last"
    EXPLICIT = "explicit"


class ReplicateReduce(enum.StrEnum):
    INDIVIDUAL = "individual"
    MEAN = "mean"


class NumericalAcceptance(enum.StrEnum):
    REQUIRED = "required"
    DIAGNOSTIC = "diagnostic"


class TrainerKind(enum.StrEnum):
    """Built-in trainers run under the owner's custody; external ones may be delegated."""

    BUILTIN = "builtin"
    EXTERNAL = "external"


def _checkpoint_rule(value: object) -> CheckpointRule:
    return as_enum(CheckpointRule, value, "checkpoint rule")


def _replicate_reduce(value: object) -> ReplicateReduce:
    return as_enum(ReplicateReduce, value, "replicate reduce")


def _numerical_acceptance(value: object) -> NumericalAcceptance:
    return as_enum(NumericalAcceptance, value, "numerical acceptance")


# -- budget --------------------------------------------------------------------------


@attrs.frozen
class Budget:
    """Four natural-number dimensions; sums are checked against :data:`MAX_NATURAL`."""

    attempt_slots: int = attrs.field(validator=_natural_field)
    admitted_wall_seconds: int = attrs.field(validator=_natural_field)
    retained_bytes: int = attrs.field(validator=_natural_field)
    peak_staging_bytes: int = attrs.field(validator=_natural_field)

    @classmethod
    def zero(cls) -> Budget:
        return cls(0, 0, 0, 0)

    def values(self) -> tuple[int, int, int, int]:
        return (
            self.attempt_slots,
            self.admitted_wall_seconds,
            self.retained_bytes,
            self.peak_staging_bytes,
        )

    def plus(self, other: Budget, label: str = "Study total") -> Budget:
        """The checked sum: a total beyond :data:`MAX_NATURAL` is refused (``invalid``)."""
        return Budget(
            *(
                natural(mine + theirs, label)
                for mine, theirs in zip(self.values(), other.values(), strict=True)
            )
        )

    def __add__(self, other: Budget) -> Budget:
        return self.plus(other)

    def fits_within(self, limits: Budget) -> bool:
        """Whether every dimension is at most the limit."""
        return all(
            mine <= limit for mine, limit in zip(self.values(), limits.values(), strict=True)
        )

    def reaches_any(self, limits: Budget) -> bool:
        """Whether some dimension has no room left (at or above its limit)."""
        return any(
            mine >= limit for mine, limit in zip(self.values(), limits.values(), strict=True)
        )

    def exceeded(self, limits: Budget) -> tuple[str, ...]:
        """The dimensions in which ``self`` is above ``limits``."""
        return tuple(
            name
            for name, mine, limit in zip(DIMENSIONS, self.values(), limits.values(), strict=True)
            if mine > limit
        )

    def remaining(self, charged: Budget) -> Budget:
        """``self - charged`` per dimension, never below zero."""
        return Budget(
            *(
                max(0, mine - theirs)
                for mine, theirs in zip(self.values(), charged.values(), strict=True)
            )
        )

    def require_positive(self, label: str) -> Budget:
        for name, value in zip(DIMENSIONS, self.values(), strict=True):
            natural(value, f"{label} {name}", 1)
        return self

    def to_document(self) -> dict[str, int]:
        return dict(zip(DIMENSIONS, self.values(), strict=True))

    @classmethod
    def from_document(cls, value: object, label: str = "Budget") -> Budget:
        if not isinstance(value, Mapping) or set(value) != set(DIMENSIONS):
            raise refuse(f"{label} requires exactly: {', '.join(DIMENSIONS)}.")
        return cls(*(value[name] for name in DIMENSIONS))


def limits_budget(value: Budget) -> Budget:
    """Study limits: a :class:`Budget` with every dimension at least 1."""
    if not isinstance(value, Budget):
        raise refuse("Study limits must be a Budget.")
    return value.require_positive("Study limit")


# -- selection policy ----------------------------------------------------------------


def _capabilities(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise refuse("Unsupported selection policy: required capabilities must be a list.")
    items = tuple(value)
    if len(items) > MAX_CAPABILITIES:
        raise refuse("Unsupported selection policy: too many required capabilities.")
    for item in items:
        text(item, "Required capability", 64)
    if len(set(items)) != len(items):
        raise refuse("Duplicate required capability.")
    return typing.cast(tuple[str, ...], items)


def _tie_break(_instance: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if value != TIE_BREAK:
        raise refuse("Unsupported selection policy: tie break must be 'trial_id'.")


@attrs.frozen
class SelectionPolicy:
    """A ``selection_policy_v1``: how a candidate checkpoint is chosen.

    Content-addressed: :attr:`sha256` is the sha256 of :meth:`to_document`'s
    canonical JSON, and a study stores each policy once per digest.
    """

    metric_definition_sha256: str = attrs.field(
        validator=field_check(lambda v, _n: sha256_hex(v, "Metric definition sha256"))
    )
    checkpoint_rule: CheckpointRule = attrs.field(converter=_checkpoint_rule)
    required_capabilities: tuple[str, ...] = attrs.field(default=(), converter=_capabilities)
    replicate_reduce: ReplicateReduce = attrs.field(
        default=ReplicateReduce.INDIVIDUAL, converter=_replicate_reduce
    )
    numerical_acceptance: NumericalAcceptance = attrs.field(
        default=NumericalAcceptance.DIAGNOSTIC,
        converter=_numerical_acceptance,
    )
    tie_break: str = attrs.field(default=TIE_BREAK, validator=_tie_break)

    def to_document(self) -> dict[str, Any]:
        return {
            "format": POLICY_FORMAT,
            "metric_definition_sha256": self.metric_definition_sha256,
            "checkpoint_rule": str(self.checkpoint_rule),
            "replicate_reduce": str(self.replicate_reduce),
            "required_capabilities": list(self.required_capabilities),
            "numerical_acceptance": str(self.numerical_acceptance),
            "tie_break": self.tie_break,
        }

    @property
    def sha256(self) -> str:
        return sha256_json(self.to_document())

    @classmethod
    def from_document(cls, value: object) -> SelectionPolicy:
        keys = {
            "format",
            "metric_definition_sha256",
            "checkpoint_rule",
            "replicate_reduce",
            "required_capabilities",
            "numerical_acceptance",
            "tie_break",
        }
        if not isinstance(value, Mapping) or set(value) != keys:
            raise refuse("Unsupported selection policy.")
        if value["format"] != POLICY_FORMAT:
            raise refuse("Unsupported selection policy format.")
        if not isinstance(value["required_capabilities"], list):
            raise refuse("Unsupported selection policy: required capabilities must be a list.")
        return cls(
            metric_definition_sha256=value["metric_definition_sha256"],
            checkpoint_rule=value["checkpoint_rule"],
            required_capabilities=value["required_capabilities"],
            replicate_reduce=value["replicate_reduce"],
            numerical_acceptance=value["numerical_acceptance"],
            tie_break=value["tie_break"],
        )
