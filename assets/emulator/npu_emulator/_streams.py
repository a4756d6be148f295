"""Streams and events of the emulated device (torch-npu 2.14.0 ``npu/streams.py``, ``npu/utils.py``): every op
already ran when it returns, so a stream only records which one is current per device (``torch.npu.stream(s)``
makes ``s`` the current stream until the block ends, as on a real device) and an event records host time. Below ``_memory`` and ``_backend``, which publish these
as ``torch.npu.Stream``, ``torch.npu.current_stream``..., and below ``_tensor`` (``Tensor.record_stream``)."""

from __future__ import annotations

import time
from typing import Any

import torch

from npu_emulator import _devices
from npu_emulator._errors import EmulatedNPUError, emulated_message

_CURRENT_STREAM: dict[int, Any] = {}


class Stream:
    """A stream on the emulated device: every op already ran when it returns."""

    _next_id = 1

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        del kwargs
        self.device_index = _devices.index_of(device)
        self.priority = priority
        self.device_type = 1  # c10 DeviceType of PrivateUse1's slot, as torch_npu's Stream reports it
        self.stream_id = Stream._next_id
        Stream._next_id += 1
        self._prev: list[Any] = []

    @property
    def device(self) -> torch.device:
        return torch.device("npu", self.device_index)

    def synchronize(self) -> None:
        """Ops run synchronously on the emulated device."""

    def wait_stream(self, stream: Stream) -> None:
        del stream

    def wait_event(self, event: Event) -> None:
        del event

    def query(self) -> bool:
        return True

    def record_event(self, event: Event | None = None) -> Event:
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and (other.stream_id, other.device_index) == (self.stream_id, self.device_index)

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index))

    def __repr__(self) -> str:
        return f"<torch_npu.npu.Stream device=npu:{self.device_index} npu_stream={self.stream_id}>"

    def __enter__(self) -> Stream:
        # As torch.Stream: the stream is the current one inside the block.
        self._prev.append(current_stream(self.device_index))
        set_stream(self)
        return self

    def __exit__(self, *exc: object) -> None:
        set_stream(self._prev.pop())


_DEFAULT_STREAMS: dict[int, Stream] = {}


def default_stream(device: Any = None) -> Stream:
    index = _devices.index_of(device)
    found = _DEFAULT_STREAMS.get(index)
    if found is None:
        found = _DEFAULT_STREAMS[index] = Stream(index)
    return found


class Event:
    """An event recording host time (ops are synchronous on the emulated device)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        del blocking, interprocess
        self.enable_timing = enable_timing
        self._time: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        del stream
        self._time = time.perf_counter()

    def synchronize(self) -> None:
        """Nothing is pending on the emulated device."""

    def wait(self, stream: Stream | None = None) -> None:
        del stream

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: Event) -> float:
        if self._time is None or end_event._time is None:
            msg = emulated_message(
                "Both events must be recorded before calculating elapsed time.",
                "Event.elapsed_time",
                "torch.cuda.Event semantics",
            )
            raise EmulatedNPUError(msg)
        return (end_event._time - self._time) * 1000.0


def current_stream(device: Any = None) -> Any:
    index = _devices.index_of(device)
    found = _CURRENT_STREAM.get(index)
    return found if found is not None else default_stream(index)


def set_stream(stream: Any) -> None:
    """Make ``stream`` the current stream of its device (None: no-op)."""
    if stream is None:
        return
    _CURRENT_STREAM[stream.device_index] = stream


class StreamContext:
    """``torch.npu.stream(s)``: ``s`` is the current stream of its device inside the block (None: no-op)."""

    def __init__(self, stream_ctx: Any) -> None:  # torch_npu's parameter name
        self.stream = stream_ctx
        self.src_prev_stream: Any = None
        self.dst_prev_stream: Any = None

    def __enter__(self) -> None:
        stream = self.stream
        if stream is None:
            return
        self.src_prev_stream = current_stream()
        if self.src_prev_stream.device != stream.device:
            self.dst_prev_stream = current_stream(stream.device_index)
        set_stream(stream)

    def __exit__(self, *exc: object) -> None:
        stream = self.stream
        if stream is None:
            return
        if self.src_prev_stream.device != stream.device:
            set_stream(self.dst_prev_stream)
        set_stream(self.src_prev_stream)


def stream(stream: Any) -> StreamContext:
    return StreamContext(stream)


PUBLIC = (Stream, Event, default_stream, current_stream, set_stream, StreamContext, stream)
