"""Episode dataset over HDF5 demonstrations and small training utilities."""

import os
import random

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class EpisodicDataset(Dataset):
    def __init__(self, episode_ids, dataset_dir: str, camera_names, norm_stats: dict) -> None:
        self.episode_ids = episode_ids
        self.dataset_dir = dataset_dir
        self.camera_names = camera_names
        self.norm_stats = norm_stats

    def __len__(self) -> int:
        return len(self.episode_ids)

    def __getitem__(self, index: int):
        episode_id = self.episode_ids[index]
        path = os.path.join(self.dataset_dir, f"episode_{episode_id}.hdf5")
        with h5py.File(path, "r") as root:
            episode_len = root["/action"].shape[0]
            start_ts = np.random.choice(episode_len)
            qpos = root["/observations/qpos"][start_ts]
            image_dict = {cam: root[f"/observations/images/{cam}"][start_ts] for cam in self.camera_names}
            action = root["/action"][start_ts:]
        action_len = episode_len - start_ts
        padded_action = np.zeros((episode_len, action.shape[1]), dtype=np.float32)
        padded_action[:action_len] = action
        is_pad = np.zeros(episode_len, dtype=bool)
        is_pad[action_len:] = True
        all_cam_images = np.stack([image_dict[cam] for cam in self.camera_names], axis=0)
        image_data = torch.from_numpy(all_cam_images).permute(0, 3, 1, 2).float() / 255.0
        qpos_data = torch.from_numpy(qpos).float()
        action_data = torch.from_numpy(padded_action)
        is_pad = torch.from_numpy(is_pad)
        action_data = (action_data - self.norm_stats["action_mean"]) / self.norm_stats["action_std"]
        qpos_data = (qpos_data - self.norm_stats["qpos_mean"]) / self.norm_stats["qpos_std"]
        return image_data, qpos_data, action_data, is_pad


def get_norm_stats(dataset_dir: str, num_episodes: int) -> dict:
    all_qpos, all_action = [], []
    for episode_idx in range(num_episodes):
        with h5py.File(os.path.join(dataset_dir, f"episode_{episode_idx}.hdf5"), "r") as root:
            all_qpos.append(torch.from_numpy(root["/observations/qpos"][()]))
            all_action.append(torch.from_numpy(root["/action"][()]))
    all_qpos = torch.stack(all_qpos).float()
    all_action = torch.stack(all_action).float()
    return {
        "action_mean": all_action.mean(dim=[0, 1]),
        "action_std": all_action.std(dim=[0, 1]).clip(1e-2, np.inf),
        "qpos_mean": all_qpos.mean(dim=[0, 1]),
        "qpos_std": all_qpos.std(dim=[0, 1]).clip(1e-2, np.inf),
    }


def load_data(dataset_dir, num_episodes, camera_names, batch_size_train, batch_size_val):
    shuffled = np.random.permutation(num_episodes)
    train_ids = shuffled[: int(0.8 * num_episodes)]
    val_ids = shuffled[int(0.8 * num_episodes) :]
    norm_stats = get_norm_stats(dataset_dir, num_episodes)
    train = EpisodicDataset(train_ids, dataset_dir, camera_names, norm_stats)
    val = EpisodicDataset(val_ids, dataset_dir, camera_names, norm_stats)
    train_loader = DataLoader(train, batch_size=batch_size_train, shuffle=True, pin_memory=True, num_workers=1)
    val_loader = DataLoader(val, batch_size=batch_size_val, shuffle=True, pin_memory=True, num_workers=1)
    return train_loader, val_loader, norm_stats


def compute_dict_mean(epoch_dicts):
    result = {k: None for k in epoch_dicts[0]}
    num_items = len(epoch_dicts)
    for k in result:
        value_sum = 0
        for epoch_dict in epoch_dicts:
            value_sum += epoch_dict[k]
        result[k] = value_sum / num_items
    return result


def detach_dict(d: dict) -> dict:
    return {k: v.detach() for k, v in d.items()}


def set_seed(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
