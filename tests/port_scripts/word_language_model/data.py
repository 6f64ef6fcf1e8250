"""Reproduces the pattern of pytorch/examples/word_language_model/data.py (not a copy): a Dictionary (word <->
index) and a Corpus with train/valid/test as one long 1-D LongTensor of token ids each. Our own synthetic text: a
seeded stream of words from a small vocabulary instead of reading files."""

import random

import torch


class Dictionary:
    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


class Corpus:
    def __init__(self, seed: int = 17) -> None:
        self.dictionary = Dictionary()
        words = [f"w{k}" for k in range(30)] + ["<eos>"]
        rng = random.Random(seed)
        self.train = self._ids([rng.choice(words) for _ in range(1200)])
        self.valid = self._ids([rng.choice(words) for _ in range(300)])
        self.test = self._ids([rng.choice(words) for _ in range(300)])

    def _ids(self, tokens: list[str]) -> torch.Tensor:
        return torch.tensor([self.dictionary.add_word(token) for token in tokens], dtype=torch.long)
