"""Language-goal encoder for goal-conditioned PushT variants: a frozen T5 encoder."""

import os

from transformers import T5EncoderModel, T5Tokenizer


def load_goal_encoder(local_dir: str = "checkpoints/t5-small"):
    if os.path.isdir(local_dir):
        tokenizer = T5Tokenizer.from_pretrained(local_dir)
        encoder = T5EncoderModel.from_pretrained(local_dir)
    else:
        tokenizer = T5Tokenizer.from_pretrained("t5-small")
        encoder = T5EncoderModel.from_pretrained("t5-small")
    encoder.requires_grad_(False)
    return tokenizer, encoder


def load_fixed_goal_encoder():
    tokenizer = T5Tokenizer.from_pretrained("google/t5-v1_1-small")
    encoder = T5EncoderModel.from_pretrained("google/t5-v1_1-small")
    return tokenizer, encoder
