"""The receipt codec: a study view as canonical JSON data, and back.

A write that replays stores its answer as a receipt document
(:func:`to_document`); :func:`from_document` rebuilds the view from its type
annotations and refuses, as ``unavailable``, a document that differs from
them. Pure: no SQL, no I/O.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from benchledger.domain.canonical import canonical_value
from benchledger.domain.study import refuse
from benchledger.errors import StudyError

_T = TypeVar("_T")


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
