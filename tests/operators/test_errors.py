"""A failing user function names the step, its file:line, the time and the record."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import operators  # noqa: F401 - registers the Stream methods
from timely import Dataflow, GraphBuildError, UserFunctionError


def _line_of(text: str) -> int:
    lines, start = inspect.getsourcelines(inspect.getmodule(_line_of))  # type: ignore[arg-type]
    return next(
        start + i + 1 for i, line in enumerate(lines) if text in line and "_line_of" not in line
    )


def _run(build: Any, records: list[Any], workers: int = 2) -> UserFunctionError:
    flow = Dataflow("errors")
    inp = flow.new_input()
    build(inp.stream).collect("out")
    inp.advance_to(3)
    inp.send(records)
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=workers, backend="inline", seed=1)
    return info.value


def test_select_error_names_the_record_and_line() -> None:
    err = _run(lambda s: s.select(lambda x: 10 // x, name="divide"), [5, 2, 0, 1])  # boom-select
    assert err.step == "divide"
    assert err.where == f"{__file__}:{_line_of('boom-select')}"
    assert err.time == (3,)
    assert err.record_repr == "0"
    assert "ZeroDivisionError" in str(err)


def test_where_and_select_many_name_the_record() -> None:
    err = _run(lambda s: s.where(lambda x: x["k"]), [{"k": 1}, {"j": 2}])
    assert err.step == "where" and err.record_repr == "{'j': 2}"
    err = _run(lambda s: s.select_many(lambda x: range(x)), [1, "two"])
    assert err.step == "select_many" and err.record_repr == "'two'"


def test_keyed_user_functions_name_the_record() -> None:
    def fold(acc: int, r: int) -> int:
        if r == 7:
            raise ValueError("no sevens")  # boom-fold
        return acc + r

    err = _run(lambda s: s.aggregate(lambda r: r % 2, int, fold, lambda a, b: a + b), [1, 7, 2])
    assert err.step == "aggregate.combine" and err.record_repr == "7"
    assert err.where == f"{__file__}:{_line_of('boom-fold')}"

    def reduce(k: int, vs: list[int]) -> list[int]:
        raise KeyError(k)

    err = _run(lambda s: s.group_by(lambda r: r % 2, reduce), [4])
    assert err.step == "group_by" and err.record_repr == "(0, [4])" and err.time == (3,)

    err = _run(
        lambda s: s.join(s, lambda r: r, lambda r: r, lambda a, b: a / (b - 1)), [1], workers=1
    )
    assert err.step == "join" and err.record_repr == "(1, 1)"


def test_bad_arguments_fail_at_build_time() -> None:
    flow = Dataflow("bad")
    s = flow.new_input().stream
    with pytest.raises(GraphBuildError, match="seed must be a zero-argument function"):
        s.aggregate(lambda r: r, 0, lambda a, r: a, lambda a, b: a)
    with pytest.raises(GraphBuildError, match="select: f must be a function"):
        s.select(3)


def test_count_by_key_error_names_the_record() -> None:
    from timely import Dataflow, UserFunctionError

    def first_letter(word: str) -> str:
        return word[0]

    flow = Dataflow("count-error")
    inp = flow.new_input()
    inp.stream.count_by(first_letter).collect("out")
    inp.send(["apple", "", "pear"])
    with pytest.raises(UserFunctionError, match="IndexError") as info:
        flow.run(workers=2, backend="inline")
    assert info.value.record_repr == "''" and info.value.time == (0,)
    assert info.value.where.startswith(__file__ + ":")


def test_a_function_with_the_wrong_signature_is_the_users_mistake() -> None:
    """Called with arguments it does not take, a user function fails as the user's
    (at its own line), not as a bug in timely."""
    err = _run(
        lambda s: s.running_reduce(lambda r: r % 2, lambda r: r),  # boom-arity
        [1, 2, 3],
    )
    assert err.step.startswith("running_reduce")
    assert err.where == f"{__file__}:{_line_of('boom-arity')}"
    assert "takes 1 positional argument but 2 were given" in str(err)
