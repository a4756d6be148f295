"""BuiltinMinMaxNPU: elementwise on device tensors; every non-tensor use identical to the builtins."""

from __future__ import annotations

import builtins
import math

import pytest
import torch

ORIGINAL = {"min": builtins.min, "max": builtins.max}


def test_builtin_max_of_device_tensors_fails_without_the_patch(accel):
    a = torch.tensor([1.0, 5.0], device=accel)
    b = torch.tensor([4.0, 2.0], device=accel)
    with pytest.raises(RuntimeError, match="ambiguous"):
        max(a, b)


def test_device_tensors_go_elementwise(accel, make_patcher):
    a_host = torch.tensor([1.0, 5.0, math.nan])
    b_host = torch.tensor([4.0, 2.0, 0.0])
    patcher = make_patcher()
    a, b = a_host.to(accel), b_host.to(accel)
    cases = [
        (max(a, b), torch.maximum(a_host, b_host)),
        (min(a, b), torch.minimum(a_host, b_host)),
        (max(a, 3.0), a_host.clamp_min(3.0)),
        (min(2, a), a_host.clamp_max(2)),
        (max(a, torch.tensor(3.0)), torch.maximum(a_host, torch.tensor(3.0))),
        (max(a, b, torch.tensor([9.0, 0.0, 1.0], device=accel)), torch.tensor([9.0, 5.0, math.nan])),
        (min([a, b]), torch.minimum(a_host, b_host)),
    ]
    for got, want in cases:
        assert got.device.type == accel.type
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    lead = max(a, 0.0, 2.0)  # the device tensor first, plain numbers after it
    torch.testing.assert_close(lead.cpu(), a_host.clamp_min(0.0).clamp_min(2.0), equal_nan=True)
    ints = torch.tensor([1, 7], device=accel)
    assert max(ints, 3).dtype is torch.int64 and max(ints, 3).cpu().tolist() == [3, 7]
    assert patcher.fires()["BuiltinMinMaxNPU"] == 10


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as err:  # noqa: BLE001 - the error type and text are part of the behaviour
        return (type(err), str(err))


class Gen:
    """A fresh generator per call (a generator can be consumed only once)."""

    def __init__(self, *items):
        self.items = items

    def __repr__(self):
        return f"Gen{self.items}"


NON_TENSOR_CALLS = [
    ((1, 2), {}),
    ((2.5, -1), {}),
    (("b", "a", "c"), {}),
    (([3, 1, 2],), {}),
    ((Gen(4, 8, 2),), {}),
    ((Gen(),), {"default": 0}),
    ((Gen(),), {}),
    (("hello",), {}),
    (([],), {"default": None}),
    (([],), {}),
    ((), {}),
    ((5,), {}),
    (([1, -7, 3],), {"key": abs}),
    ((1, -7, 3), {"key": abs}),
    (({"a": 2, "b": 1},), {"key": lambda k: -ord(k)}),
    (([1, "a"],), {}),
    ((1, 2), {"default": 3}),
    ((1, 2), {"foo": 3}),
    (([1, 2],), {"key": None}),
    ((3, 4), {"key": None}),
    (([],), {"key": None, "default": "d"}),
    (([[1, 2], [1, 3]],), {}),
    ((math.nan, 1.0), {}),
    (([torch.tensor(1.0), torch.tensor(3.0)],), {}),
    ((torch.tensor(2.0), 1.0), {}),
]


@pytest.mark.parametrize(("args", "kwargs"), NON_TENSOR_CALLS, ids=[repr(c)[:40] for c in NON_TENSOR_CALLS])
@pytest.mark.parametrize("name", ["min", "max"])
def test_non_device_calls_behave_like_the_builtins(make_patcher, name, args, kwargs):
    def call(fn):
        fresh = tuple((x for x in a.items) if isinstance(a, Gen) else a for a in args)
        return _outcome(lambda: fn(*fresh, **kwargs))

    expected = call(ORIGINAL[name])
    patcher = make_patcher()
    got = call(getattr(builtins, name))
    if expected[0] == "ok" and isinstance(expected[1], torch.Tensor):
        assert got[0] == "ok" and got[1] is not None and torch.equal(got[1], expected[1])
    else:
        assert got == expected
    assert patcher.fires()["BuiltinMinMaxNPU"] == 0


def test_patched_builtins_are_replaced_and_restored(make_patcher):
    patcher = make_patcher()
    assert builtins.max is not ORIGINAL["max"] and builtins.min is not ORIGINAL["min"]
    assert builtins.max.__name__ == "max"
    patcher.remove()
    assert builtins.max is ORIGINAL["max"] and builtins.min is ORIGINAL["min"]
