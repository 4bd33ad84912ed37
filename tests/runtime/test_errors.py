"""Bad input and misuse: clear errors, at build time where possible."""

from __future__ import annotations

from typing import Any

import pytest

from timely import (
    ConfigError,
    Dataflow,
    GraphBuildError,
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
    with pytest.raises(GraphBuildError, match=r"\.enter\(loop\)"):
        inner.concat(s)
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
