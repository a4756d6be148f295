"""Trains vit-pytorch's NaViT (images of several sizes packed into one sequence, kept apart by an attention mask)
for a few steps: the public attention program of the --parity tests.

The project directory holds `vit_pytorch/na_vit.py` of the pinned wheel (with an empty `__init__.py`, whose imports
need torchvision) and einops. The loader draws random sizes and flips, and NaViT drops tokens at random and has
embedding dropout.
"""

import numpy as np
import torch
import torch.nn.functional as F

try:
    import torch_npu  # noqa: F401
except ImportError:
    torch_npu = None

from vit_pytorch.na_vit import NaViT


class Images(torch.utils.data.Dataset):
    """3-channel images of 16 to 32 pixels a side, class = which channel is brightest."""

    def __len__(self):
        return 96

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        label = int(rng.integers(0, 3))
        h, w = (int(s) for s in torch.randint(2, 5, (2,)) * 8)  # random size
        image = torch.rand(3, h, w) * 0.5
        image[label] += 0.5
        if torch.rand(()) < 0.5:
            image = image.flip(-1)  # random flip
        return image, label


def collate(items):
    return [image for image, _ in items], torch.tensor([label for _, label in items])


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    device = torch.device("npu" if torch_npu is not None and torch.npu.is_available() else "cpu")
    model = NaViT(image_size=32, patch_size=8, num_classes=3, dim=32, depth=2, heads=4, dim_head=8, mlp_dim=64,
                  emb_dropout=0.1, token_dropout_prob=0.25).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Images(), batch_size=8, shuffle=True, collate_fn=collate)
    for _epoch in range(4):
        for images, labels in loader:
            images = [image.to(device) for image in images]
            logits = model(images, group_images=True, group_max_seq_len=32)
            loss = F.cross_entropy(logits, labels.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            print("loss", loss.item())


if __name__ == "__main__":
    main()
