"""ACT policy: the CVAE plus the L1 + KL training objective and temporal ensembling at inference."""

import torch
import torch.nn.functional as F
import torchvision.transforms as transforms
from torch import nn
from torchvision.models import resnet18

from act.detr_vae import DETRVAE


def kl_divergence(mu: torch.Tensor, logvar: torch.Tensor):
    klds = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())
    total_kld = klds.sum(1).mean(0, True)
    dimension_wise_kld = klds.mean(0)
    mean_kld = klds.mean(1).mean(0, True)
    return total_kld, dimension_wise_kld, mean_kld


class ACTPolicy(nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        backbones = nn.ModuleList(
            nn.Sequential(*list(resnet18(weights=None).children())[:-2]) for _ in cfg["camera_names"]
        )
        self.model = DETRVAE(backbones, cfg["state_dim"], cfg["chunk_size"], cfg["camera_names"],
                             cfg["hidden_dim"], cfg["nheads"], cfg["enc_layers"], cfg["dec_layers"],
                             cfg["dim_feedforward"])
        self.kl_weight = cfg["kl_weight"]
        self.lr = cfg["lr"]
        self.normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])

    def forward(self, qpos, image, actions=None, is_pad=None):
        image = self.normalize(image)
        if actions is None:
            a_hat, _, _ = self.model(qpos, image)
            return a_hat
        num_queries = self.model.num_queries
        actions = actions[:, :num_queries]
        is_pad = is_pad[:, :num_queries]
        a_hat, is_pad_hat, (mu, logvar) = self.model(qpos, image, actions, is_pad)
        total_kld, _, _ = kl_divergence(mu, logvar)
        all_l1 = F.l1_loss(actions, a_hat, reduction="none")
        l1 = (all_l1 * ~is_pad.unsqueeze(-1)).mean()
        pad_loss = self.pad_loss(is_pad_hat, is_pad)
        return {"l1": l1, "kl": total_kld[0], "pad": pad_loss, "loss": l1 + total_kld[0] * self.kl_weight}

    def pad_loss(self, is_pad_hat: torch.Tensor, is_pad: torch.Tensor) -> torch.Tensor:
        total = 0.0
        for b in range(is_pad.shape[0]):
            total = total + F.binary_cross_entropy_with_logits(is_pad_hat[b, :, 0], is_pad[b].float())
        return total / is_pad.shape[0]

    @torch.no_grad()
    def temporal_ensemble(self, all_time_actions: torch.Tensor, t: int, k: float = 0.01) -> torch.Tensor:
        actions_for_curr_step = all_time_actions[:, t]
        actions_populated = torch.all(actions_for_curr_step != 0, dim=1)
        actions_for_curr_step = actions_for_curr_step[actions_populated]
        exp_weights = torch.exp(-k * torch.arange(len(actions_for_curr_step), device=all_time_actions.device))
        exp_weights = (exp_weights / exp_weights.sum()).unsqueeze(dim=1)
        return (actions_for_curr_step * exp_weights).sum(dim=0, keepdim=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=1e-4)

    def prefers_channels_last(self, device: torch.device) -> bool:
        return device.type == "cuda"
