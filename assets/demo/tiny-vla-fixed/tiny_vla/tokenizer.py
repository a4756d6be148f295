"""A word-level tokenizer for the short robot instructions of the synthetic dataset."""

from __future__ import annotations

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

WORDS = (
    "pick push move place put slide the a to of on block cube ball red green blue yellow "
    "left right up down forward backward near far corner center target slowly quickly"
).split()


class InstructionTokenizer:
    """Maps instructions to fixed-length id lists; padding and truncation happen here, on the host."""

    def __init__(self, max_length: int = 12) -> None:
        self.vocab = [PAD, BOS, EOS, UNK, *WORDS]
        self.token_to_id = {tok: i for i, tok in enumerate(self.vocab)}
        self.max_length = max_length

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def pad_id(self) -> int:
        return self.token_to_id[PAD]

    def encode(self, text: str) -> tuple[list[int], int]:
        """Returns the padded ids and the number of real tokens (BOS and EOS included)."""
        words = text.lower().replace(",", " ").split()
        ids = [self.token_to_id[BOS]]
        ids += [self.token_to_id.get(w, self.token_to_id[UNK]) for w in words]
        ids = ids[: self.max_length - 1] + [self.token_to_id[EOS]]
        length = len(ids)
        ids += [self.pad_id] * (self.max_length - length)
        return ids, length

    def encode_batch(self, texts: list[str]) -> tuple[list[list[int]], list[int]]:
        all_ids, lengths = [], []
        for text in texts:
            ids, length = self.encode(text)
            all_ids.append(ids)
            lengths.append(length)
        return all_ids, lengths

    def decode(self, ids: list[int]) -> str:
        special = {PAD, BOS, EOS}
        return " ".join(self.vocab[i] for i in ids if self.vocab[i] not in special)


if __name__ == "__main__":
    tokenizer = InstructionTokenizer()
    for example in ("push the red block left", "move the blue cube to the far corner"):
        ids, n = tokenizer.encode(example)
        print(f"{example!r} -> {ids[:n]} ({n} tokens) -> {tokenizer.decode(ids)!r}")
