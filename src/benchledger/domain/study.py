"""Experiment studies: value objects, input rules and immutable views.

A study is a finite :class:`Budget` (four natural-number dimensions) plus a
content-addressed :class:`SelectionPolicy`. Trials are immutable members, each
bound to one recipe material (:class:`MaterialRef`) and a replicate number.
Each admission reserves a conservative charge (the material's resource
envelope) for one run attempt; reconciliation settles reservations from run
state but keeps the worst-case charge.

Everything here is pure: no SQL, no I/O, no clock. Bad input raises
:class:`~benchledger.errors.StudyError` with its category.
"""

from __future__ import annotations

import enum
import json
import re
import types
import typing
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import attrs

from benchledger.domain.canonical import (
    CanonicalJsonError,
    canonical_json,
    canonical_value,
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
_T = TypeVar("_T")

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


def _field(check: typing.Callable[[object, str], object]) -> Any:
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


def _trainer_kind(value: object) -> TrainerKind:
    return as_enum(TrainerKind, value, "trainer kind")


def _run_state(value: object) -> RunState:
    return as_enum(RunState, value, "run state")


def _study_state(value: object) -> StudyState:
    return as_enum(StudyState, value, "study state")


def _reservation_state(value: object) -> ReservationState:
    return as_enum(ReservationState, value, "reservation state")


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
        validator=_field(lambda v, _n: sha256_hex(v, "Metric definition sha256"))
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


# -- materials -----------------------------------------------------------------------


@attrs.frozen
class MaterialRef:
    """A recipe material, by the sha256 of its canonical description."""

    sha256: str = attrs.field(validator=_field(lambda v, _n: sha256_hex(v, "Material sha256")))


@attrs.frozen
class Material:
    """A registered recipe material: what it trains, with what, within which envelope."""

    ref: MaterialRef
    trainer_id: str = attrs.field(validator=_field(lambda v, _n: identifier(v, "Trainer id")))
    trainer_kind: TrainerKind = attrs.field(converter=_trainer_kind)
    envelope: Budget
    recipe_json: str

    @property
    def builtin(self) -> bool:
        return self.trainer_kind is TrainerKind.BUILTIN

    @property
    def sha256(self) -> str:
        return self.ref.sha256


def material_document(
    recipe: object, envelope: Budget, trainer_id: str, trainer_kind: TrainerKind
) -> dict[str, Any]:
    """The canonical description a material's sha256 is computed over.

    The recipe must be canonical JSON data of at most 1 MiB (``invalid``).
    """
    recipe_value = _recipe(recipe)
    return {
        "format": "recipe_material_v1",
        "recipe": recipe_value,
        "resource_envelope": envelope.to_document(),
        "trainer": {"id": trainer_id, "kind": str(trainer_kind)},
    }


def material_sha256(
    recipe: object, envelope: Budget, trainer_id: str, trainer_kind: TrainerKind
) -> str:
    return sha256_json(material_document(recipe, envelope, trainer_id, trainer_kind))


def _recipe(recipe: object) -> Any:
    """A recipe as plain JSON data: canonical, at most :data:`MAX_DOCUMENT_BYTES`."""
    return json.loads(bounded_json(recipe, "Material recipe"))


#: The keys of a material document (``benchledger study material FILE``).
MATERIAL_SPEC_KEYS = ("recipe", "envelope", "trainer_id", "builtin")


@attrs.frozen
class MaterialSpec:
    """A recipe material as a person describes it, before it is registered.

    The document (``{"recipe", "envelope", "trainer_id", "builtin"}``) is read
    and checked by :meth:`from_document`; registering it yields a
    :class:`Material` whose ref is :attr:`ref`.
    """

    recipe: Any
    envelope: Budget
    trainer_id: str
    builtin: bool

    @property
    def trainer_kind(self) -> TrainerKind:
        return TrainerKind.BUILTIN if self.builtin else TrainerKind.EXTERNAL

    @property
    def ref(self) -> MaterialRef:
        """The ref the material has once registered (its canonical description's sha256)."""
        return MaterialRef(
            material_sha256(self.recipe, self.envelope, self.trainer_id, self.trainer_kind)
        )

    @classmethod
    def from_document(cls, value: object) -> MaterialSpec:
        """Read one material document; ``StudyError(invalid)`` when it is not one."""
        if not isinstance(value, Mapping) or set(value) != set(MATERIAL_SPEC_KEYS):
            raise refuse(f"A material needs exactly: {', '.join(MATERIAL_SPEC_KEYS)}.")
        if not isinstance(value["builtin"], bool):
            raise refuse("Material builtin must be true or false.")
        return cls(
            recipe=_recipe(value["recipe"]),
            envelope=Budget.from_document(value["envelope"], "Material envelope"),
            trainer_id=identifier(value["trainer_id"], "Trainer id"),
            builtin=value["builtin"],
        )

    def to_document(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "envelope": self.envelope.to_document(),
            "trainer_id": self.trainer_id,
            "builtin": self.builtin,
        }


# -- runs (as the run registry reports them) -------------------------------------------


@attrs.frozen
class RunRequest:
    """What a study asks the run registry to admit: one exact attempt."""

    run_id: str
    run_key: str
    request_sha256: str
    actor_id: str
    study_id: str
    trial_id: str
    material_sha256: str
    parent_run_id: str | None
    approval_id: str | None


@attrs.frozen
class Run:
    """A run attempt as its registry knows it.

    ``custody_ceased`` says the registry has proved the attempt's process gone
    (drained); a terminal state without it is not yet *ceased*.
    """

    id: str
    state: RunState = attrs.field(converter=_run_state)
    actor_id: str
    study_id: str
    trial_id: str
    request_sha256: str
    material_sha256: str
    parent_run_id: str | None
    approval_id: str | None
    custody_ceased: bool
    created_at: float
    updated_at: float

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_RUN_STATES

    @property
    def ceased(self) -> bool:
        """Terminal and with custody proved ended: it can consume nothing more."""
        return self.state in TERMINAL_RUN_STATES and self.custody_ceased


# -- views -----------------------------------------------------------------------------


@attrs.frozen
class Study:
    """A study at one revision (a ``study_v1`` document)."""

    id: str
    revision: int
    name: str
    state: StudyState = attrs.field(converter=_study_state)
    admission_epoch: int
    limits: Budget
    policy_sha256: str
    membership_revision: int
    trial_ids: tuple[str, ...]
    stop_receipt_id: str | None

    @property
    def open(self) -> bool:
        return self.state is StudyState.OPEN


@attrs.frozen
class StudySummary:
    """A study in a listing: everything but the member list, plus its size."""

    id: str
    revision: int
    name: str
    state: StudyState = attrs.field(converter=_study_state)
    admission_epoch: int
    limits: Budget
    policy_sha256: str
    membership_revision: int
    trial_count: int
    stop_receipt_id: str | None

    @property
    def open(self) -> bool:
        return self.state is StudyState.OPEN


@attrs.frozen
class Trial:
    """An immutable member: one material and one replicate number."""

    id: str
    study_id: str
    material: MaterialRef
    replicate: int
    membership_revision: int


@attrs.frozen
class Reservation:
    """A conservative charge for one admitted run attempt."""

    id: str
    study_id: str
    admission_epoch: int
    request_key: str
    actor_id: str
    trial_id: str
    parent_run_id: str | None
    run_id: str
    request_sha256: str
    material_sha256: str
    envelope: Budget
    state: ReservationState = attrs.field(converter=_reservation_state)
    settled: Budget | None

    @property
    def charge(self) -> Budget:
        """Worst case: the whole envelope, settled or not."""
        return self.envelope


@attrs.frozen
class PageInfo:
    offset: int
    limit: int
    total: int
    study_revision: int
    next_offset: int | None


@attrs.frozen
class StudyPage:
    """``get``: the study, one page of its reservations, and what is charged."""

    study: Study
    reservations: tuple[Reservation, ...]
    charged: Budget
    page: PageInfo

    @property
    def remaining(self) -> Budget:
        return self.study.limits.remaining(self.charged)


@attrs.frozen
class StudyList:
    studies: tuple[StudySummary, ...]
    limit: int
    next_cursor: str | None


@attrs.frozen
class ExecutionGrant:
    """An owner's time-limited grant for one actor to execute one exact trial material."""

    id: str
    study_id: str
    trial_id: str
    material_sha256: str
    consumer_actor_id: str
    granted_by: str
    created_at: float
    expires_at: float


@attrs.frozen
class Admission:
    """``admit``'s receipt: the reservation and the run as admitted."""

    reservation: Reservation
    run: Run


@attrs.frozen
class StopReceipt:
    """``stop``'s receipt: the closed epoch and the runs still to be ceased."""

    study_id: str
    stop_receipt_id: str
    admission_epoch: int
    run_ids: tuple[str, ...]


@attrs.frozen
class StopOutcome:
    receipt: StopReceipt
    status: StudyPage


@attrs.frozen
class Checkpoint:
    """One entry of a run's checkpoint index (in index order)."""

    sha256: str = attrs.field(validator=_field(lambda v, _n: sha256_hex(v, "Checkpoint sha256")))
    step: int = attrs.field(validator=_field(lambda v, _n: natural(v, "Checkpoint step")))
    selected: bool = attrs.field(
        default=False, validator=_field(lambda v, _n: boolean(v, "Checkpoint selected"))
    )


@attrs.frozen
class Candidate:
    """A retained diagnostic decision (a ``candidate_v1`` document)."""

    id: str
    study_id: str
    trial_id: str
    run_id: str
    checkpoint_sha256: str
    evaluation_sha256: str
    policy_sha256: str
    decision: str
    limitations: tuple[str, ...]

    def to_document(self) -> dict[str, Any]:
        return {"format": "candidate_v1", **to_document(self)}

    @property
    def sha256(self) -> str:
        return sha256_json(self.to_document())


@attrs.frozen
class CandidateRef:
    id: str
    sha256: str


@attrs.frozen
class CandidateResult:
    ref: CandidateRef
    candidate: Candidate
    run_id: str
    checkpoint: Checkpoint


@attrs.frozen
class CandidatePage:
    run_id: str
    candidates: tuple[CandidateRef, ...]
    limit: int
    next_cursor: str | None


# -- receipt documents -------------------------------------------------------------------


def to_document(value: object) -> dict[str, Any]:
    """A view as plain canonical JSON data (enums as strings, tuples as lists)."""
    return typing.cast(
        dict[str, Any],
        canonical_value(attrs.asdict(typing.cast(Any, value))),
    )


def from_document(kind: type[_T], value: object) -> _T:
    """Rebuild a view written by :func:`to_document`; a mismatch is ``unavailable``."""
    try:
        return typing.cast(_T, _structure(kind, value))
    except (KeyError, TypeError, ValueError, StudyError):
        raise refuse(
            f"Stored {kind.__name__} receipt differs from its schema.", "unavailable"
        ) from None


def _structure(kind: Any, value: Any) -> Any:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        arguments = [item for item in typing.get_args(kind) if item is not type(None)]
        if value is None:
            if len(arguments) == len(typing.get_args(kind)):
                raise TypeError("null where a value is required")
            return None
        return _structure(arguments[0], value)
    if origin is tuple:
        (item_kind, _ellipsis) = typing.get_args(kind)
        if not isinstance(value, list):
            raise TypeError("expected a list")
        return tuple(_structure(item_kind, item) for item in value)
    if isinstance(kind, type) and attrs.has(kind):
        if not isinstance(value, Mapping):
            raise TypeError("expected an object")
        hints = typing.get_type_hints(kind)
        fields = attrs.fields(kind)
        names = {field.name for field in fields}
        if not names <= set(value) or not set(value) <= names | {"format"}:
            raise KeyError("fields differ")
        return kind(**{f.alias: _structure(hints[f.name], value[f.name]) for f in fields})
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(value)
    if kind is float:
        if type(value) not in (int, float):
            raise TypeError("expected a number")
        return float(value)
    if kind in (int, str, bool):
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}")
        return value
    raise TypeError(f"unsupported receipt type {kind!r}")
