"""Reproduces the pattern of pytorch/examples/word_language_model/model.py (not a copy): an RNN language model
(embedding, LSTM, decoder to the vocabulary), sequence-first input, init_hidden(bsz) giving the zero state.
Our own small model."""

import torch
from torch import nn


class RNNModel(nn.Module):
    def __init__(self, ntoken: int, ninp: int, nhid: int, nlayers: int, dropout: float = 0.2) -> None:
        super().__init__()
        self.ntoken, self.nhid, self.nlayers = ntoken, nhid, nlayers
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, tokens, hidden):
        out, hidden = self.rnn(self.drop(self.encoder(tokens)), hidden)
        return self.decoder(self.drop(out)).view(-1, self.ntoken), hidden

    def init_hidden(self, bsz: int):
        weight = next(self.parameters())
        zeros = torch.zeros(self.nlayers, bsz, self.nhid, dtype=weight.dtype, device=weight.device)
        return zeros, zeros.clone()
