"""One fresh interpreter of `cargo xtask stress-exit`: install the emulated npu, train one step, exit.

Usage: python step_and_exit.py EMULATOR_DIR CPU

Pinned to one CPU (``CPU``; -1: not pinned), so that autograd's threads and the main thread take turns as on a
loaded machine, the case where an exit race shows. The program leaves an unflushed line in stdout's buffer and
an ``atexit`` handler, and exits with status 3: the checker expects all three to survive interpreter exit.
"""

import atexit
import os
import sys

cpu = int(sys.argv[2])
if cpu >= 0 and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {cpu})
sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402

import npu_emulator  # noqa: E402

npu_emulator.install()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to("npu")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss = model(torch.randn(4, 8, device="npu")).pow(2).mean()
loss.backward()
optimizer.step()
atexit.register(lambda: print("atexit handler ran", flush=True))
sys.stdout.write(f"step done, loss {loss.item():.4f}\n")  # left in the buffer: flushed at exit
sys.exit(3)
