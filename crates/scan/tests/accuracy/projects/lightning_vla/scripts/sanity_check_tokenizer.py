"""Round-trips random actions through the action tokenizer and prints the quantization error."""

import numpy as np

from vla.models.action_tokenizer import ActionTokenizer

if __name__ == "__main__":
    tokenizer = ActionTokenizer(vocab_size=32000, bins=256)
    actions = np.random.uniform(-1, 1, size=(1000, 7))
    decoded = tokenizer.decode_token_ids_to_actions(tokenizer(actions))
    print("max abs error:", np.abs(decoded - actions).max())
