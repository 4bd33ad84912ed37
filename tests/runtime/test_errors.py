"""Bad input and misuse: clear errors, at build time where possible."""

from __future__ import annotations

import sys
from typing import Any, ClassVar

import pytest

from timely import (
    ConfigError,
    Dataflow,
    GraphBuildError,
    InternalError,
    TimelyError,
    UserFunctionError,
    Vertex,
    exchange,
)


class Explode(Vertex):
    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        for r in records:
            if r == 13:
                raise ZeroDivisionError("unlucky")  # the line the error must name
        self.send_by(0, records, time)


def _line_of(text: str) -> int:
    import inspect

    src, start = inspect.getsourcelines(Explode.on_recv)
    return start + next(i for i, line in enumerate(src) if text in line)


def test_user_function_error_names_step_location_time_and_record() -> None:
    flow = Dataflow("boom")
    inp = flow.new_input()
    inp.stream.unary(Explode, name="explode").collect("out")
    inp.advance_to(4)
    inp.send([1, 13, 2])
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=2, backend="inline")
    err = info.value
    assert err.step == "explode"
    assert err.where == f"{__file__}:{_line_of('unlucky')}"
    assert err.time == (4,)
    assert err.record_repr == "13"  # the record it failed on, not the whole batch
    assert "ZeroDivisionError: unlucky" in str(err)


def test_inspect_error_names_the_record() -> None:
    flow = Dataflow("inspect")
    inp = flow.new_input()
    seen: list[int] = []

    def check(x: int) -> None:
        seen.append(x)
        assert x < 5, "too big"

    inp.stream.inspect(check, name="check").collect("out")
    inp.send([1, 7, 2])
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=1, backend="inline")
    assert info.value.step == "check" and info.value.record_repr == "7"
    assert info.value.where.startswith(__file__ + ":")


def test_exchange_key_returning_unhashable_names_the_record() -> None:
    flow = Dataflow("badkey")
    inp = flow.new_input()
    inp.stream.exchange(lambda r: [r], name="by-list").collect("out")
    inp.send([5])
    with pytest.raises(UserFunctionError, match=r"no stable hash") as info:
        flow.run(workers=2, backend="inline")
    assert info.value.record_repr == "5" and info.value.time == (0,)


def test_exchange_key_must_be_a_function() -> None:
    with pytest.raises(TypeError, match=r"key function record -> hashable"):
        exchange([1, 2])  # type: ignore[arg-type]


def test_cycle_without_feedback_fails_at_build_time() -> None:
    flow = Dataflow("cycle")
    inp = flow.new_input()
    loop = flow.loop("spin")
    handle, back = loop.feedback(step=0)  # a feedback that does not advance the counter
    body = inp.stream.enter(loop).concat(back).unary(Explode, name="body")
    handle.connect(body)
    body.leave().collect("out")
    with pytest.raises(GraphBuildError, match=r"cycle does not advance time: .*'body'.*feedback"):
        flow.build()


def test_stream_from_another_dataflow_is_refused() -> None:
    a, b = Dataflow("a"), Dataflow("b")
    sa = a.new_input().stream
    sb = b.new_input().stream
    with pytest.raises(GraphBuildError, match=r"belongs to dataflow 'a', not 'b'"):
        sb.concat(sa)


def test_scope_mismatch_and_unconnected_feedback() -> None:
    flow = Dataflow("scopes")
    s = flow.new_input().stream
    loop = flow.loop("l")
    inner = s.enter(loop)
    assert inner.concat(s).scope is loop  # a stream from outside is entered for you
    other = flow.loop("m")
    with pytest.raises(GraphBuildError, match=r"is in scope 'm1' but the step is in 'l0'"):
        inner.concat(s.enter(other))  # a sibling loop's stream: leave it first
    with pytest.raises(GraphBuildError, match=r"call \.leave\(\)"):
        inner.collect("x")
    loop.feedback()
    inner.leave().collect("y")
    with pytest.raises(GraphBuildError, match=r"never connected"):
        flow.build()


def test_bad_configuration_fails_before_anything_starts() -> None:
    flow = Dataflow("cfg")
    flow.new_input().stream.collect("out")
    with pytest.raises(ConfigError, match="positive integer"):
        flow.run(workers=0, backend="inline")
    with pytest.raises(ConfigError, match="unknown backend 'spark'"):
        flow.run(workers=1, backend="spark")
    with pytest.raises(ConfigError, match="address= is for the ray backend"):
        flow.run(workers=1, backend="inline", address="auto")


@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_every_backend_refuses_an_unknown_option_the_same_way(backend: str) -> None:
    """Checked from the backend's signature before it starts (no Ray is started here)."""
    flow = Dataflow("cfg")
    flow.new_input().stream.collect("out")
    with pytest.raises(ConfigError, match=rf"the {backend} backend does not take colour; its"):
        flow.run(workers=1, backend=backend, colour="blue")


def test_a_registered_backend_is_usable_by_name() -> None:
    from timely.backends.inline import InlineSession
    from timely.session.registry import backend_names, register_backend

    class Traced(InlineSession):
        started: ClassVar[list[int]] = []

        def __init__(self, spec: Any, workers: int, checkpoint: Any = None, seed: int = 0) -> None:
            Traced.started.append(workers)
            super().__init__(spec, workers, seed=seed, checkpoint=checkpoint)

    register_backend("traced", Traced)
    assert "traced" in backend_names()
    flow = Dataflow("registered")
    h = flow.new_input()
    h.stream.select(lambda x: x + 1).collect("out")
    h.send([1, 2])
    assert sorted(flow.run(workers=2, backend="traced").records("out")) == [2, 3]
    assert Traced.started == [2]


def test_vertex_instance_instead_of_factory_is_refused() -> None:
    flow = Dataflow("inst")
    with pytest.raises(GraphBuildError, match="not an instance"):
        flow.new_input().stream.unary(Explode())  # type: ignore[arg-type]


def test_sending_before_the_current_time_is_refused() -> None:
    class Back(Vertex):
        def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
            self.send_by(0, records, (time[0] - 1,))

    flow = Dataflow("back")
    inp = flow.new_input()
    inp.stream.unary(Back, name="back").collect("out")
    inp.advance_to(3)
    inp.send([1])
    with pytest.raises(UserFunctionError, match=r"cannot send at \(2,\).*retain"):
        flow.run(workers=1, backend="inline")


def test_input_misuse() -> None:
    flow = Dataflow("inputs")
    inp = flow.new_input("events")
    inp.stream.collect("out")
    inp.advance_to(2)
    with pytest.raises(ValueError, match="cannot go back"):
        inp.advance_to(1)
    inp.close()
    with pytest.raises(ValueError, match="'events' is closed"):
        inp.send([1])


def test_vertex_factory_error_names_the_step() -> None:
    def make() -> Vertex:
        raise RuntimeError("cannot open the model file")

    flow = Dataflow("factory")
    flow.new_input().stream.unary(make, name="load-model").collect("out")
    with pytest.raises(
        UserFunctionError, match=r"'load-model'.*cannot open the model file"
    ) as info:
        flow.run(workers=1, backend="inline")
    assert info.value.where.startswith(__file__ + ":")


# -- whose fault: the user's code or timely's own ------------------------------------------------
def test_a_bug_inside_an_operator_is_an_internal_error_not_the_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import operators  # noqa: F401 - registers the Stream methods
    from operators.windows import WindowReduce

    # Stand in for a bug in the window operator: its partial tables come back as lists,
    # so its own loop (in operators/windows.py) fails, while the user's f is fine.
    monkeypatch.setattr(WindowReduce, "_epochs", lambda self, lo, hi: [[("a", 1)]])
    flow = Dataflow("internal")
    inp = flow.new_input()
    inp.stream.reduce_by_window(lambda r: r, lambda a, b: a + b, 2, name="sums").collect("out")
    inp.advance_to(1)
    inp.send([1, 2])
    with pytest.raises(TimelyError) as info:
        flow.run(workers=1, backend="inline")
    err = info.value
    assert not isinstance(err, UserFunctionError)  # not the user's function failing
    assert isinstance(err, InternalError)
    assert err.step == "sums" and err.time == (2,)
    windows = sys.modules["operators.windows"].__file__
    assert err.where.startswith(f"{windows}:")  # the innermost frame: timely's own line
    assert isinstance(err.__cause__, AttributeError)
    message = str(err)
    assert "step 'sums': internal error in timely at " + err.where in message
    assert "please report it" in message and "AttributeError" in message


def test_a_bug_inside_a_connector_is_an_internal_error() -> None:
    from connectors.collections import from_collection

    src = from_collection([1, 2, 3], partitions=1)
    src._parts = [[5]]  # type: ignore[list-item] - corrupt the source's own table
    flow = Dataflow("connector")
    flow.source(src, name="numbers").collect("out")
    with pytest.raises(TimelyError) as info:
        flow.run(workers=1, backend="inline")
    err = info.value
    assert not isinstance(err, UserFunctionError)
    assert isinstance(err, InternalError)
    assert err.step == "numbers"
    assert err.where.startswith(f"{sys.modules['connectors.collections'].__file__}:")
    assert "not subscriptable" in str(err)


def test_failures_of_user_code_stay_user_function_errors() -> None:
    """Guards: the user's lambda, a builtin passed as the function (no frame of its own),
    and a key that is not hashable all fail in or because of user code."""
    import operators  # noqa: F401 - registers the Stream methods

    def run(build: Any, records: list[Any]) -> UserFunctionError:
        flow = Dataflow("user")
        inp = flow.new_input()
        build(inp.stream).collect("out")
        inp.send(records)
        with pytest.raises(UserFunctionError) as info:
            flow.run(workers=2, backend="inline")
        return info.value

    line = sys._getframe().f_lineno + 1
    err = run(lambda s: s.select(lambda x: 10 // x, name="divide"), [5, 0])
    assert err.step == "divide" and err.where == f"{__file__}:{line}"
    assert err.record_repr == "0" and isinstance(err.__cause__, ZeroDivisionError)
    err = run(lambda s: s.select(int, name="parse"), ["7", "x"])
    assert err.step == "parse" and err.record_repr == "'x'"
    assert isinstance(err.__cause__, ValueError)
    err = run(lambda s: s.running_reduce(lambda r: {r}, lambda a, b: a + b), [1, 2])
    assert "unhashable type: 'set'" in str(err)
