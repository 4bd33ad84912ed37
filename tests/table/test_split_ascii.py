"""``col(s).str.split()`` is ``str.split()`` per row, on the ASCII fast path and off it.

The expression takes Arrow's byte-wise ``ascii_split_whitespace`` when
:func:`operators.table.ascii.plain_ascii` says the text is ASCII without the separators
0x1C-0x1F (which Python counts as whitespace and that kernel does not), and the
code-point one otherwise. The property: on random text (ASCII, those separators,
non-ASCII whitespace such as U+00A0 and U+3000, other non-ASCII, nulls, leading and
trailing blanks), sliced at random offsets, the split equals Python's. Mutation checks:
a ``plain_ascii`` that forgets the separators, that reads one string fewer than the
slice holds, or that ignores the slice's offset must each be caught.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import operators.table.expr as expr
from operators.table import col
from operators.table.ascii import plain_ascii, text_bytes

SCHEMA = pa.schema([("s", pa.string())])

CHARS = st.sampled_from([*"ab z\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f", "é", "\xa0", "\u3000", "\x85"])
TEXT = st.none() | st.text(CHARS, max_size=8)
"""Strings over letters, ASCII whitespace, the four separators and non-ASCII (some of
it whitespace to Python, some not)."""

SLICED = st.lists(TEXT, max_size=12).flatmap(
    lambda xs: st.tuples(st.just(xs), st.integers(0, len(xs)), st.integers(0, len(xs)))
)
"""Strings and a slice ``[a:b]`` of their array: a slice's bytes start past its
buffer's first byte, as a batch's columns do after a ``take`` or an exchange."""


def split_of(values: list[str | None], a: int, b: int) -> list[list[str] | None]:
    array = pa.array(values, pa.string()).slice(a, max(b - a, 0))
    batch = pa.RecordBatch.from_arrays([array], schema=SCHEMA)
    split, _ = expr.compile_expr(col("s").str.split(), SCHEMA, "test")
    got: list[list[str] | None] = expr.evaluate(split, batch).to_pylist()
    return got


def check_split(values: list[str | None], a: int, b: int) -> None:
    want = [None if s is None else s.split() for s in values[a:b]]
    assert split_of(values, a, b) == want


@settings(max_examples=300, deadline=None)
@given(SLICED)
def test_split_is_str_split_on_every_slice(case: tuple[list[str | None], int, int]) -> None:
    check_split(*case)


@settings(max_examples=200, deadline=None)
@given(SLICED)
def test_plain_ascii_says_what_the_slice_holds(case: tuple[list[str | None], int, int]) -> None:
    values, a, b = case
    held = [s for s in values[a:b] if s is not None]
    plain = all(ord(c) < 0x80 and not 0x1C <= ord(c) <= 0x1F for s in held for c in s)
    got = plain_ascii(pa.array(values, pa.string()).slice(a, max(b - a, 0)))
    if plain:
        # Nulls here hold no bytes (pyarrow writes none for them), so nothing hides it.
        assert got
    else:
        assert not got


def test_the_fast_path_is_taken_for_plain_text_only() -> None:
    assert plain_ascii(pa.array(["a b", "c\td", ""]))
    assert plain_ascii(pa.array([], pa.string()))
    assert not plain_ascii(pa.array(["a\x1fb"]))
    assert not plain_ascii(pa.array(["a\xa0b"]))
    assert not plain_ascii(pa.array(["ab"], pa.large_string()))  # not told: the slow path
    assert text_bytes(pa.array([1, 2])) is None


def forgets_the_separators(values: pa.Array) -> bool:
    raw = text_bytes(values)
    return raw is not None and (len(raw) == 0 or int(raw.max()) < 0x80)


def reads_one_string_fewer(values: pa.Array) -> bool:
    return len(values) == 0 or plain_ascii(values.slice(0, len(values) - 1))


def ignores_the_offset(values: pa.Array) -> bool:
    if not isinstance(values, pa.StringArray):
        return False
    n = len(values)
    ends = np.frombuffer(values.buffers()[1], np.int32, n + 1, 0)  # the buffer's start
    return plain_ascii(pa.StringArray.from_buffers(n, pa.py_buffer(ends), values.buffers()[2]))


MUTANTS: dict[str, Callable[[pa.Array], bool]] = {
    "forgets the separators 0x1C-0x1F": forgets_the_separators,
    "reads one string fewer": reads_one_string_fewer,
    "ignores the slice's offset": ignores_the_offset,
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_the_property_catches_a_wrong_fast_path_check(
    monkeypatch: pytest.MonkeyPatch, mutant: str
) -> None:
    monkeypatch.setattr(expr, "plain_ascii", MUTANTS[mutant])
    run = settings(max_examples=2000, deadline=None)(given(SLICED)(lambda c: check_split(*c)))
    with pytest.raises(AssertionError):
        run()
