"""Trains denoising-diffusion-pytorch's GaussianDiffusion1D with a Unet1D for a few steps: the public diffusion
program of the --parity tests.

The project directory holds `denoising_diffusion_pytorch/denoising_diffusion_pytorch_1d.py` and `version.py` of the
pinned wheel (with an empty `__init__.py`, whose imports need torchvision and friends) and einops. The module imports
accelerate, ema-pytorch and tqdm for its Trainer1D, which this loop does not use: they get empty stand-ins.
The sequences are action-chunk-like; the loader adds random jitter and a random shift, the Unet has dropout, and
the diffusion draws its timesteps and noise on the device.
"""

import importlib.machinery
import sys
import types

for name, attr in (("accelerate", "Accelerator"), ("ema_pytorch", "EMA"), ("tqdm", "tqdm"), ("tqdm.auto", "tqdm")):
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    setattr(module, attr, None)
    sys.modules[name] = module

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import torch_npu  # noqa: F401
except ImportError:
    torch_npu = None

from denoising_diffusion_pytorch.denoising_diffusion_pytorch_1d import GaussianDiffusion1D, Unet1D  # noqa: E402


class Chunks(torch.utils.data.Dataset):
    """Smooth 4-channel sequences of length 32 in [0, 1], with random jitter and shift."""

    def __len__(self):
        return 128

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        t = np.linspace(0, 1, 32, dtype=np.float32)
        phase = rng.uniform(0, 2 * np.pi, (4, 1)).astype(np.float32)
        x = torch.from_numpy(0.5 + 0.4 * np.sin(2 * np.pi * t[None] + phase))
        x = torch.roll(x, int(torch.randint(-2, 3, ())), dims=1)  # random shift
        return (x + 0.02 * torch.randn_like(x)).clamp(0, 1)  # random jitter


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    device = torch.device("npu" if torch_npu is not None and torch.npu.is_available() else "cpu")
    model = Unet1D(dim=16, dim_mults=(1, 2), channels=4, dropout=0.1)
    diffusion = GaussianDiffusion1D(model, seq_length=32, timesteps=1000).to(device)
    opt = torch.optim.Adam(diffusion.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Chunks(), batch_size=8, shuffle=True)
    for _epoch in range(4):
        for batch in loader:
            loss = diffusion(batch.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            print("loss", loss.item())


if __name__ == "__main__":
    main()
