"""Streams episodes of an RLDS mixture and turns each step into a prompt + action-token sample."""

from typing import Dict, Iterator, Tuple

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, IterableDataset

from vla.models.action_tokenizer import ActionTokenizer
from vla.utils.torch_utils import worker_init_fn

IGNORE_INDEX = -100


class RLDSBatchTransform:
    def __init__(self, tokenizer, action_tokenizer: ActionTokenizer, image_transform) -> None:
        self.tokenizer = tokenizer
        self.action_tokenizer = action_tokenizer
        self.image_transform = image_transform

    def __call__(self, step: Dict) -> Dict[str, torch.Tensor]:
        action = np.asarray(step["action"], dtype=np.float32)
        instruction = step["language_instruction"].lower()
        prompt = f"In: What action should the robot take to {instruction}?\nOut:"
        action_tokens = self.action_tokenizer(action)
        prompt_ids = self.tokenizer(prompt, add_special_tokens=True).input_ids
        input_ids = torch.tensor(list(prompt_ids) + action_tokens.tolist())
        labels = input_ids.clone()
        labels[: len(prompt_ids)] = IGNORE_INDEX
        pixel_values = self.image_transform(step["image"])
        return {"input_ids": input_ids, "labels": labels, "pixel_values": pixel_values}


class EpisodeStream(IterableDataset):
    def __init__(self, episodes, transform: RLDSBatchTransform, shuffle_buffer: int = 1000) -> None:
        self.episodes = episodes
        self.transform = transform
        self.shuffle_buffer = shuffle_buffer

    def __iter__(self) -> Iterator[Dict[str, torch.Tensor]]:
        rng = np.random.default_rng()
        buffer = []
        for episode in self.episodes:
            for step in episode["steps"]:
                buffer.append(step)
                if len(buffer) >= self.shuffle_buffer:
                    idx = rng.integers(len(buffer))
                    yield self.transform(buffer.pop(idx))
        for step in buffer:
            yield self.transform(step)


def collate(instances, pad_token_id: int) -> Dict[str, torch.Tensor]:
    input_ids = pad_sequence([x["input_ids"] for x in instances], batch_first=True, padding_value=pad_token_id)
    labels = pad_sequence([x["labels"] for x in instances], batch_first=True, padding_value=IGNORE_INDEX)
    attention_mask = input_ids.ne(pad_token_id)
    pixel_values = torch.stack([x["pixel_values"] for x in instances])
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask, "pixel_values": pixel_values}


def build_dataloaders(cfg: Dict, action_tokenizer: ActionTokenizer) -> Tuple[DataLoader, DataLoader]:
    raise NotImplementedError("the dataset registry is configured per deployment: " + str(cfg["mixture"]))
