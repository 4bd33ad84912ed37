"""``col(s).str.split()`` is ``str.split()`` per row, on the ASCII fast path and off it.

The expression splits ASCII text by numpy passes over its bytes
(:func:`operators.table.ascii.split_ascii`) and anything else by Arrow's code-point
kernel. The property: on random text (ASCII, the separators 0x1C-0x1F, non-ASCII
whitespace such as U+00A0 and U+3000, other non-ASCII, nulls, empty strings, leading and
trailing blanks), sliced at random offsets, the split equals Python's, and the fast
path's result is the very list type Arrow's kernel gives. Mutation checks: a fast path
that forgets the separators, that lets a word run on across rows, that ignores the
slice's offset, that drops the null rows' validity, or that takes non-ASCII text must
each be caught.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import operators.table.ascii as ascii
import operators.table.expr as expr
from operators.table import col
from operators.table.ascii import split_ascii, text_bytes

SCHEMA = pa.schema([("s", pa.string())])

ASCII = [*"ab z\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"]
CHARS = st.sampled_from([ASCII, [*ASCII, "é", "\xa0", "\u3000", "\x85"]])
"""An example's alphabet: ASCII letters, whitespace and the four separators (the fast
path's text, half the examples), or those and non-ASCII (some of it whitespace to
Python, some not), which sends a whole array to Arrow's kernel."""

STRINGS = CHARS.flatmap(
    lambda cs: st.lists(st.none() | st.text(st.sampled_from(cs), max_size=8), max_size=12)
)

SLICED = STRINGS.flatmap(
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
def test_the_fast_path_takes_ascii_and_gives_arrows_type(
    case: tuple[list[str | None], int, int],
) -> None:
    values, a, b = case
    held = [s for s in values[a:b] if s is not None]
    array = pa.array(values, pa.string()).slice(a, max(b - a, 0))
    got = split_ascii(array)
    if all(c.isascii() for s in held for c in s):
        # Nulls here hold no bytes (pyarrow writes none for them), so the path is taken.
        assert got is not None
        assert got.type == pc.utf8_split_whitespace(array).type
        assert got.to_pylist() == [None if s is None else s.split() for s in values[a:b]]
    else:
        assert got is None


def test_the_fast_path_is_taken_for_ascii_text_only() -> None:
    assert split_ascii(pa.array(["a b", "c\td", ""])) is not None
    assert split_ascii(pa.array([], pa.string())) is not None
    assert split_ascii(pa.array(["a\xa0b"])) is None
    assert split_ascii(pa.array(["ab"], pa.large_string())) is None  # the slow path
    assert text_bytes(pa.array([1, 2])) is None
    assert split_ascii(SPANNING) is None
    check_spanning()


def split_of_array(array: pa.Array) -> list[list[str] | None]:
    batch = pa.RecordBatch.from_arrays([array], schema=SCHEMA)
    split, _ = expr.compile_expr(col("s").str.split(), SCHEMA, "test")
    got: list[list[str] | None] = expr.evaluate(split, batch).to_pylist()
    return got


SPANNING = pa.StringArray.from_buffers(
    2,
    pa.py_buffer(np.array([0, 2, 4], np.int32)),
    pa.py_buffer(b"abcd"),
    pa.py_buffer(np.array([0b01], np.uint8)),
    1,
)
"""``["ab", null]`` whose null row's offsets span bytes ``cd`` (Arrow allows it)."""


def check_spanning() -> None:
    """Split right, and as a list whose items are its valid rows' only: ``explode``
    pairs ``list_flatten`` with ``list_parent_indices``, which counts a null row's."""
    batch = pa.RecordBatch.from_arrays([SPANNING], schema=SCHEMA)
    split, _ = expr.compile_expr(col("s").str.split(), SCHEMA, "test")
    got = expr.evaluate(split, batch)
    assert got.to_pylist() == [["ab"], None]
    assert len(pc.list_parent_indices(got)) == len(pc.list_flatten(got))


MUTANTS: dict[str, tuple[str, str]] = {
    "forgets the separators 0x1C-0x1F": (
        "word &= (raw - _SEPARATORS) >= _FIVE",
        "word &= raw != 32",
    ),
    "lets a word run on into the next row": ("    cut[offsets] = True\n    ends", "    ends"),
    "starts no word at a row's start": ("    cut[offsets] = True\n    starts", "    starts"),
    "ignores the slice's offset": ("values.offset * 4", "0"),
    "drops the null rows' validity": ("mask=mask)", "mask=None)"),
    "takes non-ASCII text": ("int(raw.max()) >= 0x80", "False"),
    "reads a null row's bytes": ("return None  # a null row", "pass  # a null row"),
}
"""Edits of :mod:`operators.table.ascii`'s source, each a wrong fast path."""


def mutant(old: str, new: str) -> Any:
    """``split_ascii`` of the module's source with ``old`` replaced by ``new``."""
    source = inspect.getsource(ascii)
    assert source.count(old) == 1, old
    space: dict[str, Any] = {"__name__": "mutant"}
    exec(compile(source.replace(old, new), "mutant", "exec"), space)
    return space["split_ascii"]


@pytest.mark.parametrize("name", list(MUTANTS))
def test_the_property_catches_a_wrong_fast_path(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(expr, "split_ascii", mutant(*MUTANTS[name]))
    # No shrinking: a mutant is caught by any failing example, and shrinking one of
    # these took up to 22 s of the quick suite.
    no_shrink = (Phase.explicit, Phase.reuse, Phase.generate)
    run = settings(max_examples=2000, deadline=None, phases=no_shrink)(
        given(SLICED)(lambda c: check_split(*c))
    )
    # Wrong, or broken Arrow arrays (several distinct failures: hypothesis groups them).
    with pytest.raises(Exception):  # noqa: B017 - any failure catches the mutant
        check_spanning()
        run()
