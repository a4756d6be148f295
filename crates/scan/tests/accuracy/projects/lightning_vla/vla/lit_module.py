"""LightningModule: next-token loss on action tokens, token accuracy and L1 on decoded actions."""

from typing import Dict

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.metrics import Accuracy
from transformers import get_cosine_schedule_with_warmup

from vla.models.action_tokenizer import ActionTokenizer
from vla.models.backbone import load_backbone
from vla.models.projector import FusedMLPProjector

IGNORE_INDEX = -100


class VLALitModule(pl.LightningModule):
    def __init__(self, model_cfg: Dict, optim_cfg: Dict) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.vla, self.processor = load_backbone(model_cfg["backbone"], model_cfg.get("lora_rank"))
        self.action_tokenizer = ActionTokenizer(self.processor.tokenizer.vocab_size, model_cfg["n_action_bins"])
        self.projector = FusedMLPProjector(1024, self.vla.config.hidden_size)
        self.token_acc = Accuracy()
        self.optim_cfg = optim_cfg
        self.action_dim = model_cfg["action_dim"]

    def forward(self, batch: Dict[str, torch.Tensor]):
        return self.vla(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            pixel_values=batch["pixel_values"].to(torch.bfloat16),
            labels=batch["labels"],
        )

    def _action_logits(self, output, batch):
        n_patches = self.vla.vision_backbone.featurizer.patch_embed.num_patches
        logits = output.logits[:, n_patches:-1]
        gt = batch["labels"][:, 1:]
        mask = gt > self.action_tokenizer.action_token_begin_idx
        return logits, gt, mask

    def training_step(self, batch: Dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        output = self(batch)
        loss = output.loss
        logits, gt, mask = self._action_logits(output, batch)
        preds = logits.argmax(dim=2)
        correct = (preds == gt) & mask
        acc = correct.sum().float() / mask.sum().float()
        pred_actions = self.action_tokenizer.decode_token_ids_to_actions(preds[mask].cpu().numpy())
        true_actions = self.action_tokenizer.decode_token_ids_to_actions(gt[mask].cpu().numpy())
        l1 = torch.tensor(np.abs(pred_actions - true_actions).mean(), device=self.device)
        self.log_dict({"train/loss": loss, "train/acc": acc, "train/l1": l1}, prog_bar=True, sync_dist=True)
        return loss

    def validation_step(self, batch: Dict[str, torch.Tensor], batch_idx: int) -> Dict[str, torch.Tensor]:
        output = self(batch)
        logits, gt, mask = self._action_logits(output, batch)
        preds = logits.argmax(dim=2)
        per_episode = []
        for i in range(preds.shape[0]):
            m = mask[i]
            per_episode.append((preds[i][m] == gt[i][m]).float().mean().item())
        self.token_acc(preds[mask], gt[mask])
        return {"val_loss": output.loss, "episode_acc": torch.tensor(per_episode)}

    def validation_epoch_end(self, outputs) -> None:
        val_loss = torch.stack([o["val_loss"] for o in outputs]).mean()
        self.log("val/loss", val_loss, sync_dist=True)
        self.log("val/token_acc", self.token_acc.compute())

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=self.optim_cfg["lr"], weight_decay=self.optim_cfg["weight_decay"])
        scheduler = get_cosine_schedule_with_warmup(
            optimizer, self.optim_cfg["warmup_steps"], self.optim_cfg["max_steps"]
        )
        return [optimizer], [{"scheduler": scheduler, "interval": "step"}]

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if batch_idx % 100 == 0:
            grad_norm = torch.stack(
                [p.grad.norm() for p in self.parameters() if p.grad is not None]
            ).norm()
            self.log("train/grad_norm", grad_norm.item())

    def label_smoothing_loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        n_classes = logits.shape[-1]
        smooth = torch.full((n_classes,), 0.1 / (n_classes - 1)).to(logits.device)
        one_hot = F.one_hot(target.clamp(min=0), n_classes).float()
        soft = one_hot * 0.9 + (1 - one_hot) * smooth
        return -(soft * logits.log_softmax(-1)).sum(-1).mean()
