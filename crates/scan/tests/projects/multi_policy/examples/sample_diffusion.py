import torch
from torch.utils.data import DataLoader

from robolearn.policies.diffusion import DiffusionPolicy

if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(torch.randn(8, 3), batch_size=4, pin_memory=device.type == "cuda")
    print(DiffusionPolicy().to(device)(next(iter(loader)).to(device)))
