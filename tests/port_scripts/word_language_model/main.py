"""Reproduces the pattern of pytorch/examples/word_language_model/main.py (not a copy): argparse at module level
(--emsize, --nhid, --nlayers, --lr, --clip, --epochs, --batch_size, --bptt, --dropout, --seed, --log-interval,
--save, --use-optimizer); data batched by hand without a DataLoader: batchify cuts one token stream into bsz
columns with .view(bsz, -1).t(), get_batch slices bptt rows; a hand SGD update unless --use-optimizer (AdamW);
gradient clipping; the best model saved whole with torch.save(model, f) into a file opened for writing, the lr
annealed (lr /= 4.0) when the validation loss did not improve, the saved file read back with open() for the test.
Our own small model and synthetic data."""

import argparse
import math

import data
import model as lm
import torch
from torch import nn

parser = argparse.ArgumentParser(description="tiny LSTM language model")
parser.add_argument("--emsize", type=int, default=32)
parser.add_argument("--nhid", type=int, default=32)
parser.add_argument("--nlayers", type=int, default=2)
parser.add_argument("--lr", type=float, default=20.0)
parser.add_argument("--clip", type=float, default=0.25)
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--batch_size", type=int, default=20)
parser.add_argument("--bptt", type=int, default=35)
parser.add_argument("--dropout", type=float, default=0.2)
parser.add_argument("--seed", type=int, default=1111)
parser.add_argument("--log-interval", type=int, default=200)
parser.add_argument("--save", type=str, default="model.pt")
parser.add_argument("--use-optimizer", action="store_true", help="AdamW instead of the hand SGD update")
args = parser.parse_args()

torch.manual_seed(args.seed)
device = torch.device("cpu")
corpus = data.Corpus()


def batchify(stream, bsz):
    columns = stream.size(0) // bsz
    return stream[: columns * bsz].view(bsz, -1).t().contiguous().to(device)


eval_batch_size = 5
train_data = batchify(corpus.train, args.batch_size)
val_data = batchify(corpus.valid, eval_batch_size)
test_data = batchify(corpus.test, eval_batch_size)

ntokens = len(corpus.dictionary)
model = lm.RNNModel(ntokens, args.emsize, args.nhid, args.nlayers, args.dropout).to(device)
criterion = nn.CrossEntropyLoss()
if args.use_optimizer:
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)


def detach_state(state):
    return tuple(part.detach() for part in state)


def get_batch(source, i):
    length = min(args.bptt, len(source) - 1 - i)
    return source[i : i + length], source[i + 1 : i + 1 + length].reshape(-1)


def evaluate(source):
    model.eval()
    total = 0.0
    hidden = model.init_hidden(eval_batch_size)
    with torch.no_grad():
        for i in range(0, source.size(0) - 1, args.bptt):
            inputs, targets = get_batch(source, i)
            output, hidden = model(inputs, hidden)
            total += len(inputs) * criterion(output, targets).item()
    return total / (len(source) - 1)


def train():
    model.train()
    hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        inputs, targets = get_batch(train_data, i)
        hidden = detach_state(hidden)
        if args.use_optimizer:
            optimizer.zero_grad()
        else:
            model.zero_grad()
        output, hidden = model(inputs, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        if args.use_optimizer:
            optimizer.step()
        else:
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
        if batch % args.log_interval == 0:
            print(f"epoch {epoch} batch {batch} loss {loss.item():.3f}")


lr = args.lr
best_val_loss = None
for epoch in range(1, args.epochs + 1):
    train()
    val_loss = evaluate(val_data)
    print(f"end of epoch {epoch}: valid loss {val_loss:.3f}, ppl {math.exp(val_loss):.2f}")
    if best_val_loss is None or val_loss < best_val_loss:
        with open(args.save, "wb") as f:
            torch.save(model, f)
        best_val_loss = val_loss
    else:
        lr /= 4.0

with open(args.save, "rb") as f:
    model = torch.load(f, weights_only=False)
    model.rnn.flatten_parameters()

test_loss = evaluate(test_data)
print(f"test loss {test_loss:.3f}, ppl {math.exp(test_loss):.2f}")
