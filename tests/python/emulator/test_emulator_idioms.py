"""Ordinary PyTorch idioms give on the emulated npu what they give on the CPU.

Each idiom is a function of the device ("cpu" or "npu") that returns what it computed (tensors, strings,
flags) or raises. It runs twice, on the CPU and on the npu, from the same seed; the two outcomes must be the same:
equal values, dtypes, shapes and ``requires_grad``, every tensor of the npu run on the npu (unless the idiom moves
it to the host on purpose, :class:`Host`), the same strings once the ``device='npu:0'`` of a device tensor's repr
is taken out, and the same exception type and message. Only the documented NPU restrictions (the emulator's rule
table) may differ, and none of these idioms meets one.
"""

from __future__ import annotations

import contextlib
import copy
import io
import pickle
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

IDIOMS: dict[str, Callable[[str], Any]] = {}

# torch < 2.3 has no tensor swap: Module.to() then replaces a module's Parameter objects (emulator README).
HAS_AMP_GRAD_SCALER = hasattr(torch.amp, "GradScaler")


def idiom(function: Callable[[str], Any]) -> Callable[[str], Any]:
    IDIOMS[function.__name__] = function
    return function


class Host:
    """A tensor the idiom put on the host on purpose: it must be a CPU tensor in both runs."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


def _outcome(function: Callable[[str], Any], device: str) -> tuple[str, Any]:
    torch.manual_seed(0)
    try:
        return "returned", function(device)
    except Exception as error:  # noqa: BLE001 - the exception is the outcome compared
        return "raised", f"{type(error).__name__}: {str(error).strip()}"


_DEVICE_SUFFIX = re.compile(r",\s*device='npu:0'")
# torch wraps a repr's suffixes onto new lines by their length: compare them unwrapped.
_WRAPPED_SUFFIX = re.compile(r",\s+(?=(?:dtype|size|requires_grad|grad_fn)=)")


def _without_device(text: str) -> str:
    return _unwrapped(_DEVICE_SUFFIX.sub("", text))


def _unwrapped(text: str) -> str:
    return _WRAPPED_SUFFIX.sub(", ", text)


def _same(expected: Any, got: Any, where: str) -> None:
    if isinstance(expected, Host):
        assert isinstance(got, Host), where
        assert expected.tensor.device.type == "cpu", where
        assert got.tensor.device.type == "cpu", f"{where}: on {got.tensor.device}, expected the host"
        _same_tensor(expected.tensor, got.tensor, where)
        return
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {type(got).__name__} instead of a tensor"
        assert expected.device.type == "cpu", where
        assert got.device == torch.device("npu", 0), f"{where}: on {got.device}, expected npu:0"
        _same_tensor(expected, got, where)
        return
    if isinstance(expected, torch.device):
        assert isinstance(got, torch.device), where
        assert (expected.type, got.type) == ("cpu", "npu"), f"{where}: {expected} vs {got}"
        return
    if isinstance(expected, str):
        assert isinstance(got, str), where
        assert _without_device(got) == _unwrapped(expected), f"{where}:\n{got!r}\nexpected (on the CPU):\n{expected!r}"
        return
    if isinstance(expected, dict):
        assert isinstance(got, dict), where
        assert list(got) == list(expected), where
        for key in expected:
            _same(expected[key], got[key], f"{where}[{key!r}]")
        return
    if isinstance(expected, (list, tuple)):
        assert type(got) is type(expected), f"{where}: {type(got).__name__}"
        assert len(got) == len(expected), where
        for i, (a, b) in enumerate(zip(expected, got, strict=True)):
            _same(a, b, f"{where}[{i}]")
        return
    assert got == expected, f"{where}: {got!r} != {expected!r} (on the CPU)"


def _same_tensor(expected: torch.Tensor, got: torch.Tensor, where: str) -> None:
    assert got.dtype == expected.dtype, f"{where}: dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"{where}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
    assert got.requires_grad == expected.requires_grad, f"{where}: requires_grad"
    assert isinstance(got, nn.Parameter) == isinstance(expected, nn.Parameter), f"{where}: Parameter"
    a, b = expected.detach().cpu(), got.detach().cpu()
    same = torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
    assert same, f"{where}: values differ\n{b}\nexpected (on the CPU):\n{a}"


# -- formatting and printing --


@idiom
def format_a_0_dim_tensor(dev: str) -> list[str]:
    t = torch.tensor(2 / 3, device=dev)
    loss = (t * 3).mean()
    return [
        f"Val loss: {loss:.5f}",
        f"{t}",
        "{:>10.3f}".format(t),
        format(t, "e"),
        f"{torch.tensor(7, device=dev):d}",
        f"{torch.tensor(True, device=dev)}",
        f"{t.half():.2f}",
        f"{torch.ones(2, device=dev, requires_grad=True).sum():.1f}",
    ]


@idiom
def format_a_1_dim_tensor(dev: str) -> list[str]:
    t = torch.arange(3.0, device=dev)
    return [f"{t}", format(t, ""), str(t), "{}".format(t)]


@idiom
def format_a_1_dim_tensor_with_a_spec_raises(dev: str) -> str:
    return f"{torch.arange(3.0, device=dev):.2f}"


@idiom
def repr_and_str(dev: str) -> list[str]:
    tensors = [
        torch.tensor([1.5, -2.25, 3.0]),
        torch.arange(5),
        torch.tensor([True, False]),
        torch.tensor([1.0, 2.0], dtype=torch.float16),
        torch.tensor([1.0, 2.0], dtype=torch.bfloat16),
        torch.tensor([1.0, 2.0], dtype=torch.float64),
        torch.tensor([1, 2], dtype=torch.int32),
        torch.tensor(3.5),
        torch.empty(0, 3),
        torch.empty(0),
        torch.empty(0, dtype=torch.int64),
        torch.tensor([float("nan"), float("inf"), -1e-8, 1e10]),
        torch.randn(5, 8),
        torch.arange(2000.0),
        torch.randn(100, 100),
    ]
    moved = [t.to(dev) for t in tensors]
    leaf = torch.randn(3, 9).to(dev).requires_grad_()
    texts = [repr(t) for t in moved] + [str(t) for t in moved]
    return [*texts, repr(leaf), repr(leaf * 2), repr(leaf.sum()), str([moved[0], moved[7]]), repr((moved[1],))]


@idiom
def print_tensors(dev: str) -> str:
    buffer = io.StringIO()
    loss = torch.tensor(0.123456, device=dev)
    with contextlib.redirect_stdout(buffer):
        print(loss)
        print("loss", loss, loss.item())
        print([torch.ones(2, device=dev), torch.zeros(1, 2, device=dev)])
        print(f"{loss:.3f}")
    return buffer.getvalue()


@idiom
def repr_of_parameters_and_modules(dev: str) -> list[str]:
    model = nn.Linear(2, 3).to(dev)
    return [repr(model.weight), str(model.bias), repr(model), repr(list(model.parameters()))]


# -- inference_mode and no_grad --


@idiom
def inference_mode_on_a_modules_parameters(dev: str) -> list[Any]:
    embed = nn.Embedding(4, 8).to(dev)
    head = nn.Linear(8, 3).to(dev)
    with torch.inference_mode():
        cls = torch.unsqueeze(embed.weight, 0).repeat(2, 1, 1)
        out = head(cls)
        view = embed.weight.t()
        row = embed.weight[1]
        flat = embed.weight.view(-1)
        flags = [cls.is_inference(), out.is_inference(), view.is_inference(), row.is_inference(), out.requires_grad]
    return [cls, out, view.contiguous(), row, flat, flags, out.sum()]


@idiom
def inference_mode_as_a_decorator(dev: str) -> list[Any]:
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 2)).to(dev)

    @torch.inference_mode()
    def evaluate(batch: torch.Tensor) -> torch.Tensor:
        return model(batch).softmax(-1)

    out = evaluate(torch.randn(3, 4).to(dev))
    return [out, out.is_inference(), torch.is_inference_mode_enabled()]


@idiom
def an_inference_tensor_saved_for_backward_raises(dev: str) -> Any:
    with torch.inference_mode():
        x = torch.ones(2, device=dev)
    w = torch.ones(2, device=dev, requires_grad=True)
    return (w * x).sum()


@idiom
def an_inference_tensor_updated_outside_inference_mode_raises(dev: str) -> Any:
    with torch.inference_mode():
        x = torch.ones(2, device=dev)
    return x.add_(1)


@idiom
def no_grad_and_enable_grad(dev: str) -> list[Any]:
    model = nn.Linear(3, 2).to(dev)
    x = torch.randn(4, 3).to(dev)
    with torch.no_grad():
        y = model(x)
        with torch.enable_grad():
            z = model(x)
    with torch.set_grad_enabled(False):
        w = model(x) * 2

    @torch.no_grad()
    def step() -> torch.Tensor:
        model.weight.add_(1.0)
        return model(x)

    s = step()
    return [y, z, w, s, y.grad_fn is None, z.grad_fn is not None, model.weight]


# -- torch.save / torch.load with map_location, pickling, deepcopy, state_dict --


def _indexed(dev: str) -> str:
    return "npu:0" if dev == "npu" else "cpu"


MAP_LOCATIONS: dict[str, Callable[[str], Any]] = {
    "none": lambda dev: None,
    "a_string": lambda dev: dev,
    "an_indexed_string": _indexed,
    "a_torch_device": torch.device,
    "a_dict": lambda dev: {"npu:0": _indexed(dev), "cpu": _indexed(dev)},
    "a_callable_moving_storages": lambda dev: (lambda storage, location: storage.npu() if dev == "npu" else storage),
}


def _saved_objects(dev: str) -> dict[str, Any]:
    model = nn.Linear(3, 2).to(dev)
    base = torch.arange(6.0, device=dev)
    return {
        "state_dict": model.state_dict(),
        "param": nn.Parameter(torch.ones(2, device=dev)),
        "grad_leaf": torch.full((2,), 3.0, device=dev, requires_grad=True),
        "base": base,
        "view": base[2:],
        "ints": torch.tensor([1, 2, 3], device=dev),
        "half": torch.tensor([0.5], dtype=torch.float16, device=dev),
        "step": 7,
    }


def _round_trip(dev: str, map_location: Any, *, weights_only: bool, source: str | None = None) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(_saved_objects(source or dev), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location=map_location, weights_only=weights_only)
    shares = loaded["view"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    return {**loaded, "view_shares_base": shares}


def _save_load_idiom(name: str, map_location: Callable[[str], Any]) -> None:
    for weights_only in (True, False):

        def run(dev: str, weights_only: bool = weights_only) -> dict[str, Any]:
            return _round_trip(dev, map_location(dev), weights_only=weights_only)

        run.__name__ = f"save_and_load_with_map_location_{name}_weights_only_{weights_only}"
        idiom(run)


for _name, _location in MAP_LOCATIONS.items():
    _save_load_idiom(_name, _location)


@idiom
def load_a_cpu_checkpoint_onto_the_device(dev: str) -> dict[str, Any]:
    return _round_trip(dev, dev, weights_only=True, source="cpu")


@idiom
def load_a_cpu_checkpoint_with_a_location_dict(dev: str) -> dict[str, Any]:
    return _round_trip(dev, {"cpu": _indexed(dev)}, weights_only=True, source="cpu")


@idiom
def load_a_device_checkpoint_onto_the_host(dev: str) -> dict[str, Any]:
    loaded = _round_trip(dev, "cpu", weights_only=True)
    return {k: Host(v) if isinstance(v, torch.Tensor) else v for k, v in loaded.items() if k != "state_dict"}


@idiom
def load_with_a_callable_keeping_host_storages(dev: str) -> dict[str, Any]:
    loaded = _round_trip(dev, lambda storage, location: storage, weights_only=True)
    return {k: Host(v) if isinstance(v, torch.Tensor) else v for k, v in loaded.items() if k != "state_dict"}


@idiom
def save_and_load_a_whole_module(dev: str) -> list[Any]:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).to(dev)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location=dev, weights_only=False)
    x = torch.randn(5, 3).to(dev)
    return [loaded(x), loaded[1].running_mean, [p.device.type == dev for p in loaded.parameters()]]


@idiom
def load_a_state_dict_into_a_module(dev: str) -> list[Any]:
    source = nn.Linear(4, 2).to(dev)
    buffer = io.BytesIO()
    torch.save(source.state_dict(), buffer)
    buffer.seek(0)
    target = nn.Linear(4, 2).to(dev)
    result = target.load_state_dict(torch.load(buffer, map_location=dev, weights_only=True))
    return [target.weight, target.bias, list(result.missing_keys), list(result.unexpected_keys)]


@idiom
def optimizer_state_dict_round_trip(dev: str) -> list[Any]:
    model = nn.Linear(3, 2).to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    x = torch.randn(4, 3).to(dev)
    model(x).sum().backward()
    optimizer.step()
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer, map_location=dev, weights_only=True)
    resumed = nn.Linear(3, 2).to(dev)
    resumed.load_state_dict(checkpoint["model"])
    resumed_optimizer = torch.optim.Adam(resumed.parameters(), lr=0.1)
    resumed_optimizer.load_state_dict(checkpoint["optim"])
    for m, opt in ((model, optimizer), (resumed, resumed_optimizer)):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()
    state = resumed_optimizer.state[resumed.weight]
    return [model.weight, resumed.weight, state["exp_avg"], Host(state["step"].cpu())]


@idiom
def pickle_tensors_and_modules(dev: str) -> list[Any]:
    model = nn.Linear(2, 2).to(dev)
    t = torch.randn(3).to(dev).requires_grad_()
    loaded_t, loaded_model, loaded_list = pickle.loads(pickle.dumps([t, model, [t.detach(), 5]]))
    return [loaded_t, loaded_model.weight, loaded_list, type(loaded_model).__name__]


@idiom
def deepcopy_modules_and_tensors(dev: str) -> list[Any]:
    model = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3)).to(dev)
    model(torch.randn(2, 3).to(dev)).sum().backward()
    clone = copy.deepcopy(model)
    base = torch.arange(4.0, device=dev)
    copied_base, copied_view = copy.deepcopy([base, base[1:]])
    copied_view.mul_(10)
    leaf = torch.ones(2, device=dev, requires_grad=True)
    return [
        clone[0].weight,
        clone[0].weight.grad,
        clone[0].weight is not model[0].weight,
        copied_base,
        copy.deepcopy(leaf),
        copy.copy(base),
    ]


@idiom
def deepcopy_of_a_non_leaf_tensor_raises(dev: str) -> Any:
    leaf = torch.ones(2, device=dev, requires_grad=True)
    return copy.deepcopy(leaf * 2)


# -- generators, DataLoader, pinned memory --


@idiom
def a_generator_on_the_device(dev: str) -> list[Any]:
    g = torch.Generator(device=dev)
    g.manual_seed(3)
    a = torch.randn(4, generator=g, device=dev)
    state = g.get_state()
    b = torch.rand(2, 3, generator=g, device=dev)
    g.set_state(state)
    again = torch.rand(2, 3, generator=g, device=dev)
    return [
        a,
        b,
        again,
        torch.randperm(7, generator=g, device=dev),
        torch.randint(0, 9, (5,), generator=g, device=dev),
        torch.normal(0.0, 1.0, (3,), generator=g, device=dev),
        torch.empty(3, device=dev).uniform_(generator=g),
        torch.multinomial(torch.ones(5, device=dev), 3, generator=g),
        torch.bernoulli(torch.full((4,), 0.5, device=dev), generator=g),
        g.initial_seed(),
        g.device,
        isinstance(g, torch.Generator),
        Host(state),
    ]


@idiom
def a_dataloader_shuffling_with_a_generator(dev: str) -> list[Any]:
    dataset = torch.utils.data.TensorDataset(torch.arange(12.0).view(6, 2), torch.arange(6))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))
    return [[x.to(dev), y.to(dev)] for x, y in loader]


@idiom
def a_dataloader_with_pinned_memory_and_non_blocking_copies(dev: str) -> list[Any]:
    dataset = torch.utils.data.TensorDataset(torch.arange(8.0).view(4, 2), torch.arange(4))
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, pin_memory=True)
    return [[x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)] for x, y in loader]


@idiom
def pinned_host_memory_and_non_blocking_copies(dev: str) -> list[Any]:
    host = torch.arange(6.0).pin_memory()
    on_device = host.to(dev, non_blocking=True)
    back = (on_device * 2).to("cpu", non_blocking=True)
    return [Host(host), on_device, Host(back), host.is_pinned(), torch.arange(2.0).is_pinned()]


# -- checkpointing, autocast, GradScaler --


def _checkpointed(dev: str, use_reentrant: bool) -> list[Any]:
    block = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.GELU(), nn.Linear(8, 4)).to(dev)
    x = torch.randn(3, 4).to(dev).requires_grad_()
    torch.manual_seed(1)  # dropout draws from the run's device generator: the same stream in both runs
    out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=use_reentrant)
    out.sum().backward()
    return [out, x.grad, [p.grad for p in block.parameters()]]


@idiom
def checkpoint_with_use_reentrant_true(dev: str) -> list[Any]:
    return _checkpointed(dev, True)


@idiom
def checkpoint_with_use_reentrant_false(dev: str) -> list[Any]:
    return _checkpointed(dev, False)


@idiom
def autocast_to_bfloat16(dev: str) -> list[Any]:
    model = nn.Linear(4, 3).to(dev)
    x = torch.randn(2, 4).to(dev)
    w = torch.randn(4, 4).to(dev)
    with torch.autocast(dev, dtype=torch.bfloat16):
        y = model(x)
        z = y + 1
        m = x @ w
        enabled = torch.is_autocast_enabled(dev) if _takes_device_type() else True
    return [y, z, m, enabled, (x @ w).dtype]


def _takes_device_type() -> bool:
    try:
        torch.is_autocast_enabled("cpu")
    except TypeError:
        return False
    return True


def _scaler(dev: str) -> Any:
    return torch.amp.GradScaler(dev, init_scale=2.0**8)


@pytest.mark.skipif(not HAS_AMP_GRAD_SCALER, reason=f"torch {torch.__version__} has no torch.amp.GradScaler")
def test_grad_scaler_trains_as_on_the_cpu(npu: torch.device) -> None:
    def run(dev: str) -> list[Any]:
        torch.manual_seed(0)
        model = nn.Linear(3, 1).to(dev)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = _scaler(dev) if dev == "cpu" else torch.npu.amp.GradScaler(init_scale=2.0**8)
        x = torch.randn(4, 3).to(dev)
        scales = []
        for step in range(3):
            optimizer.zero_grad()
            loss = model(x).pow(2).mean()
            if step == 1:
                loss = loss * float("inf")  # an overflowing step: skipped, the scale backs off
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scales.append(scaler.get_scale())
        return [model.weight, model.bias, scales]

    del npu
    _same(run("cpu"), run("npu"), "GradScaler")


# -- distributions and hooks --


@idiom
def distributions_sample_log_prob_entropy(dev: str) -> list[Any]:
    d = torch.distributions
    normal = d.Normal(torch.zeros(3, device=dev), torch.ones(3, device=dev))
    sample = normal.sample((4,))
    loc = torch.zeros(2, device=dev, requires_grad=True)
    rsample = d.Normal(loc, torch.ones(2, device=dev)).rsample((3,))
    rsample.sum().backward()
    categorical = d.Categorical(logits=torch.tensor([0.1, 0.5, 1.0], device=dev))
    picks = categorical.sample((6,))
    beta = d.Beta(torch.tensor([2.0, 0.5], device=dev), torch.tensor([3.0, 0.5], device=dev))
    draws = beta.sample((3,))
    bernoulli = d.Bernoulli(probs=torch.tensor([0.3, 0.9], device=dev))
    mvn = d.MultivariateNormal(torch.zeros(2, device=dev), torch.eye(2, device=dev))
    return [
        sample,
        normal.log_prob(sample),
        normal.entropy(),
        loc.grad,
        picks,
        categorical.log_prob(picks),
        categorical.entropy(),
        draws,
        beta.log_prob(draws),
        beta.entropy(),
        bernoulli.sample((2,)),
        mvn.log_prob(mvn.sample()),
        d.kl_divergence(normal, d.Normal(torch.ones(3, device=dev), torch.ones(3, device=dev))),
    ]


@idiom
def forward_and_backward_hooks(dev: str) -> list[Any]:
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).to(dev)
    seen: list[Any] = []
    model[0].register_forward_pre_hook(lambda module, args: seen.append(("pre", tuple(args[0].shape))))
    model[0].register_forward_hook(lambda module, args, out: out * 2)
    model[2].register_full_backward_hook(lambda module, grad_in, grad_out: seen.append(("bwd", grad_out[0])))
    x = torch.randn(5, 3).to(dev).requires_grad_()
    x.register_hook(lambda grad: grad * 3)
    y = model(x)
    y.sum().backward()
    return [y, x.grad, seen, [p.grad for p in model.parameters()]]


# -- the torch.npu memory and stream API, as torch_npu documents it (torch-npu 2.14.0 npu/memory.py, npu/utils.py) --


def test_memory_api_answers_as_torch_npu_documents(npu: torch.device) -> None:
    del npu
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        assert isinstance(getattr(torch.npu, name)(), int), name
        assert isinstance(getattr(torch.npu, name)(0), int), name
    assert torch.npu.reset_peak_memory_stats() is None
    assert torch.npu.empty_cache() is None
    free, total = torch.npu.mem_get_info()
    assert isinstance(free, int) and 0 <= free <= total
    assert torch.npu.utilization() == 0
    with pytest.raises(AssertionError, match="Invalid device id"):
        torch.npu.utilization(5)
    stats = torch.npu.memory_stats()
    assert stats["allocated_bytes.all.current"] == 0
    assert torch.npu.memory_stats_as_nested_dict()["allocated_bytes"]["all"]["peak"] == 0
    assert "NPU memory summary" in torch.npu.memory_summary()
    torch.npu.set_per_process_memory_fraction(0.5)
    assert torch.npu.get_per_process_memory_fraction() == 0.5
    torch.npu.set_per_process_memory_fraction(1.0, 0)
    with pytest.raises(ValueError, match="Allowed range: 0~1"):
        torch.npu.set_per_process_memory_fraction(1.5)
    with pytest.raises(TypeError, match="must be `float`"):
        torch.npu.set_per_process_memory_fraction(1)
    pointer = torch.npu.caching_allocator_alloc(64)
    assert isinstance(pointer, int) and pointer != 0
    torch.npu.caching_allocator_delete(pointer)


def test_stream_api_selects_streams_as_torch_npu_does(npu: torch.device) -> None:
    default = torch.npu.current_stream()
    assert default == torch.npu.default_stream()
    side = torch.npu.Stream()
    assert side != default
    with torch.npu.stream(side):
        assert torch.npu.current_stream() == side
        y = torch.ones(3, device=npu) * 2
    assert torch.npu.current_stream() == default
    with torch.npu.stream(None):
        assert torch.npu.current_stream() == default
    torch.npu.set_stream(side)
    assert torch.npu.current_stream() == side
    torch.npu.set_stream(default)
    side.wait_stream(default)
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    y = y + 1
    end.record(side)
    end.synchronize()
    assert end.query() and side.query()
    assert isinstance(start.elapsed_time(end), float)
    side.wait_event(end)
    side.synchronize()
    torch.npu.synchronize()
    assert y.tolist() == [3.0, 3.0, 3.0]


def test_a_prefetcher_records_its_tensor_on_the_compute_stream(npu: torch.device) -> None:
    """The data-prefetcher idiom: a non-blocking copy on a side stream, then ``wait_stream`` and ``record_stream``
    on the compute stream (torch_npu has an NPU kernel for ``record_stream``)."""
    side = torch.npu.Stream()
    host = torch.arange(6.0).pin_memory()
    with torch.npu.stream(side):
        batch = host.to(npu, non_blocking=True)
    compute = torch.npu.current_stream()
    compute.wait_stream(side)
    assert batch.record_stream(compute) is None
    assert batch.record_stream(side) is None
    assert (batch * 2).tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    with pytest.raises(Exception) as on_cpu:  # noqa: PT011 - compared with the npu's below
        host.record_stream("not a stream")
    with pytest.raises(type(on_cpu.value), match=re.escape(str(on_cpu.value))):
        batch.record_stream("not a stream")


def test_pinned_memory_is_reported_pinned(npu: torch.device) -> None:
    # torch_npu's pin_memory() gives page-locked host memory, and is_pinned() says so; other host tensors are not.
    host = torch.arange(4.0)
    pinned = host.pin_memory()
    assert pinned.is_pinned()
    assert pinned[1:].is_pinned()  # a view of pinned memory is pinned
    assert not host.is_pinned()
    assert torch.equal(pinned.to(npu, non_blocking=True).cpu(), host)


def test_float16_autocast_runs_on_the_device_where_cpu_torch_lacks_the_kernel(npu: torch.device) -> None:
    # An Ascend NPU has float16 matmul; CPU torch 2.1 has not: the emulator computes it in float32 and casts back.
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x = torch.randn(2, 4)
    expected = model(x)
    device_model = copy.deepcopy(model).to(npu)
    with torch.autocast("npu", dtype=torch.float16):
        out = device_model(x.to(npu))
    assert out.dtype == torch.float16
    assert torch.allclose(out.float().cpu(), expected, atol=1e-2)


# Last: every idiom above is registered by now.
@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_the_npu_gives_what_the_cpu_gives(npu: torch.device, name: str) -> None:
    del npu
    expected = _outcome(IDIOMS[name], "cpu")
    got = _outcome(IDIOMS[name], "npu")
    assert got[0] == expected[0], f"{name}: on the npu it {got[0]} {got[1]!r}; on the CPU it {expected[0]} {expected[1]!r}"
    _same(expected[1], got[1], name)


def test_repr_puts_the_device_where_torch_puts_it(npu: torch.device) -> None:
    # As torch prints a device tensor (torch/_tensor_str.py): device first, then dtype, then the autograd suffix.
    half = torch.ones(2, dtype=torch.float16, device=npu)
    assert repr(half) == "tensor([1., 1.], device='npu:0', dtype=torch.float16)"
    leaf = torch.zeros(1, dtype=torch.bfloat16, device=npu, requires_grad=True)
    assert repr(leaf) == "tensor([0.], device='npu:0', dtype=torch.bfloat16, requires_grad=True)"
    assert repr(torch.empty(0, 2, device=npu)) == "tensor([], device='npu:0', size=(0, 2))"
