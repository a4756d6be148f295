"""Train ACT (action chunking with transformers) on bimanual teleoperation data, on Ascend NPUs."""

import torch_npu  # noqa: F401
from torch_npu.contrib import transfer_to_npu  # noqa: F401

import argparse
import os
import pickle

import numpy as np
import torch
import yaml
from tqdm import tqdm

from act.policy import ACTPolicy
from act.utils import compute_dict_mean, detach_dict, load_data, set_seed


def forward_pass(data, policy: ACTPolicy, device: torch.device):
    image_data, qpos_data, action_data, is_pad = data
    image_data = image_data.to(device)
    qpos_data = qpos_data.to(device)
    action_data = action_data.to(device)
    is_pad = is_pad.to(device)
    return policy(qpos_data, image_data, action_data, is_pad)


def train_bc(train_loader, val_loader, cfg: dict) -> None:
    device = torch.device(cfg["device"])
    set_seed(cfg["seed"])
    policy = ACTPolicy(cfg["policy"]).to(device)
    optimizer = policy.configure_optimizers()
    best_val = np.inf
    for epoch in tqdm(range(cfg["num_epochs"])):
        with torch.inference_mode():
            policy.eval()
            epoch_dicts = [forward_pass(data, policy, device) for data in val_loader]
            epoch_summary = compute_dict_mean(epoch_dicts)
            if epoch_summary["loss"] < best_val:
                best_val = epoch_summary["loss"]
                torch.save(policy.state_dict(), os.path.join(cfg["ckpt_dir"], "policy_best.ckpt"))
        policy.train()
        optimizer.zero_grad()
        train_history = []
        for data in train_loader:
            forward_dict = forward_pass(data, policy, device)
            loss = forward_dict["loss"]
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            train_history.append(detach_dict(forward_dict))
        summary = compute_dict_mean(train_history)
        print(f"epoch {epoch}: train loss {summary['loss']:.5f}, val loss {epoch_summary['loss']:.5f}")
    with open(os.path.join(cfg["ckpt_dir"], "dataset_stats.pkl"), "wb") as f:
        pickle.dump({"best_val": best_val}, f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/act_aloha.yaml")
    args = parser.parse_args()
    with open(args.config) as f:
        cfg = yaml.safe_load(f)
    train_loader, val_loader, _ = load_data(cfg["dataset_dir"], cfg["num_episodes"], cfg["camera_names"],
                                            cfg["batch_size"], cfg["batch_size"])
    train_bc(train_loader, val_loader, cfg)


if __name__ == "__main__":
    main()
