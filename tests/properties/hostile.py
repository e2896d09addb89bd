"""Hostile values for the property tests: wrong types, bad text, huge numbers, deep nesting."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st


def deep_list(depth: int) -> list[Any]:
    """``[[[...]]]``, ``depth`` levels, built without recursion."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def deep_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


_HUGE_TEXT = "x" * (2**20 + 1)  # over every text and document bound

#: Values every argument gets, whatever it stands for.
FIXED: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    1,
    2**63,
    -(2**63) - 1,
    10**400,
    10**5000,
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    1e308,
    5e-324,
    1j,
    Decimal("NaN"),
    Decimal("1e5000"),
    "",
    " ",
    " padded ",
    "w\ud800",
    "\udfff",
    "evil\u202etxt.exe",
    "zero\u200bwidth",
    "\u2066isolate\u2069",
    "nul\x00byte",
    "line\nbreak",
    "del\x7f",
    "sep\u2028arator",
    "\ufeffbom",
    "e\u0301",  # not NFC
    _HUGE_TEXT,
    b"bytes",
    bytearray(b"x"),
    [],
    {},
    (),
    set(),
    frozenset({"a"}),
    object(),
    deep_list(10_000),
    deep_dict(10_000),
    [deep_list(200)],
    {"x": 10**5000},
    {"x": math.nan},
    {"x": "\ud800"},
    {1: "non-text key"},
    {"x": {1, 2}},
    {"x": b"bytes"},
    ["a"] * 100_000,
    print,
    type,
)

#: The values every parameter of every method is tried with, one at a time.
FOCUSED: tuple[Any, ...] = (
    None,
    True,
    -1,
    2**63,
    10**5000,
    math.nan,
    -math.inf,
    "",
    "w\ud800",
    "evil\u202etxt",
    "zero\u200bwidth",
    "nul\x00byte",
    "line\nbreak",
    "e\u0301",
    _HUGE_TEXT,
    b"bytes",
    object(),
    deep_list(10_000),
    {"x": 10**5000},
    {1: "non-text key"},
    print,
)


#: A name for each focused value (``FOCUSED[i]`` is ``FOCUSED_NAMES[i]``), for the tables
#: that list which values a field may accept: every other one it must refuse.
FOCUSED_NAMES: tuple[str, ...] = (
    "None",
    "True",
    "-1",
    "2**63",
    "10**5000",
    "nan",
    "-inf",
    "empty",
    "surrogate",
    "bidi",
    "zero-width",
    "nul",
    "newline",
    "not-nfc",
    "huge-text",
    "bytes",
    "object",
    "deep-list",
    "huge-int-in-dict",
    "non-text-key",
    "function",
)
assert len(FOCUSED_NAMES) == len(FOCUSED)
NAMED: dict[str, Any] = dict(zip(FOCUSED_NAMES, FOCUSED, strict=True))


def name_of(value: Any) -> str:
    """The name of a focused value (by identity, else by type and equality: the driver
    values of PostgreSQL's sweep are equal copies of some of them)."""
    for name, focused in NAMED.items():
        if focused is value:
            return name
    for name, focused in NAMED.items():
        try:
            if type(focused) is type(value) and focused == value:
                return name
        except Exception:  # a comparison that cannot be made: not this one
            continue
    return f"a {type(value).__name__}"


#: The focused values that may reach the database driver when a check misses them
#: (text the driver must encode, integers a column must hold): the PostgreSQL sweep
#: uses these; type and range refusals happen before any SQL, alike on both backends.
DRIVER_VALUES: tuple[Any, ...] = (
    2**63,
    10**5000,
    "w\ud800",
    "evil\u202etxt",
    "zero\u200bwidth",
    "nul\x00byte",
    "e\u0301",
    _HUGE_TEXT,
    {"x": 10**5000},
)


def focused_for(backend: str) -> tuple[Any, ...]:
    return FOCUSED if backend == "sqlite" else DRIVER_VALUES


def parameters(function: Callable[..., Any]) -> list[inspect.Parameter]:
    """The parameters a caller passes (not ``self``, ``*args`` or ``**kwargs``)."""
    return [
        p
        for p in inspect.signature(function).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


_WEIRD_TEXT = st.text(
    st.characters(categories=("Cc", "Cf", "Cs", "Zl", "Zp", "Zs", "Mn", "Co", "Cn", "L", "N"))
    | st.sampled_from("._-:@/ "),
    max_size=40,
)

HOSTILE: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(FIXED),
    _WEIRD_TEXT,
    st.integers(),
    st.floats(),
    st.lists(st.sampled_from(FIXED[:20]), max_size=4),
    st.dictionaries(_WEIRD_TEXT, st.sampled_from(FIXED[:30]), max_size=3),
)


def short(value: Any) -> str:
    """A bounded description of a value, for failure messages."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= 120 else text[:117] + "..."


Valid = Callable[[], Any]


@st.composite
def call_of(
    draw: st.DrawFn,
    methods: Mapping[str, Callable[..., Any]],
    valid_for: Callable[[str], Mapping[str, Valid]],
    refused: Callable[[str, str], list[str]],
) -> tuple[str, dict[str, Any]]:
    """One method and its arguments: each parameter valid (when known) or hostile, at
    least one hostile: one the parameter must refuse (``refused(method, parameter)``,
    by name), so the whole call must be refused."""
    name = draw(
        st.sampled_from(
            sorted(m for m in methods if any(refused(m, p.name) for p in parameters(methods[m])))
        )
    )
    valid = valid_for(name)
    signature = parameters(methods[name])
    must = [i for i, p in enumerate(signature) if refused(name, p.name)]
    hostile_at = draw(st.sampled_from(must))
    arguments: dict[str, Any] = {}
    for index, parameter in enumerate(signature):
        known = parameter.name in valid
        if index == hostile_at:
            arguments[parameter.name] = NAMED[draw(st.sampled_from(refused(name, parameter.name)))]
        elif not known or draw(st.integers(0, 3)) == 0:
            if not known and parameter.default is not parameter.empty and draw(st.booleans()):
                continue  # leave an unknown optional parameter at its default
            arguments[parameter.name] = draw(HOSTILE)
        else:
            arguments[parameter.name] = valid[parameter.name]()
    return name, arguments
