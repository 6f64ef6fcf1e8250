"""Which forward passes fed a backward pass, and how many samples they carried.

The training model is the one whose outputs feed backward, whatever its `training` flag (Lightning's sanity check
leaves the DDP wrapper in eval mode) and whatever else runs with gradients enabled (a validation batch without
`no_grad`, which never reaches a backward). So every top-level forward with grad enabled is remembered with its batch
size, and a hook on its output's autograd node says whether a backward reached it:

- a micro-batch is a backward pass that reached at least one forward not reached before: a second backward on the
  same batch (an auxiliary loss with retain_graph) or `torch.autograd.backward([l1, l2])` count once;
- a forward and backward again on a batch this step already counted, with nothing drawn from a loader since, is the
  same micro-batch: sharpness-aware minimisation's second pass (SAM: the gradient again at perturbed weights, one
  step) is B samples, not a second micro-batch of accumulation. The batch is the same tensor with the same data
  (its data's address, shape, type and version counter: a staging tensor that new data is copied into is not the
  same batch; and the first one still alive: a freed batch's address can be a new batch's);
- its samples are the batch sizes of the forwards it reached on data, of the module called first among them (an
  encoder takes the batch; a head on its flattened output sees batch x tokens rows; a discriminator's forward on
  generated samples back-propagated with its forward on the batch is not more samples);
- a batch whose size cannot be read (no tensor with a leading dimension) is unknown, None, never 0;
- a backward that reached only forwards fed another recorded forward's output (a GAN's discriminator on
  `fake.detach()`: the same storage) trained on generated samples, not on data: not a micro-batch.

The hook only reads: it returns None and holds no reference to the graph (it is freed with it), so training is
unchanged. It fires only while a backward runs (`torch.autograd.grad`, a gradient penalty, is not a micro-batch).
"""

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ddpcli.worker.observer.reading import first_tensor, tensors

MAX_OUTPUTS = 256  # output tensors remembered per optimizer step (a loop of many forwards keeps its first ones)


def _held(tensor: torch.Tensor) -> tuple[Any, int] | None:
    """The tensor's storage and where its data lives (equal for a tensor, its views and its `.detach()`); None where
    not readable (a tensor subclass without storage)."""
    try:
        held = tensor.untyped_storage()
        return (held, address) if (address := int(held.data_ptr())) else None
    except Exception:  # DTensor, fake or meta tensors: no storage to compare
        return None


def _storage(tensor: torch.Tensor) -> int | None:
    return found[1] if (found := _held(tensor)) is not None else None


@dataclass(eq=False)
class Forward:
    """One top-level forward with grad enabled, until a backward reaches it."""

    order: int
    module: int  # id of the module called
    samples: int | None
    loader: int | None  # id of the DataLoader that gave the last batch
    fingerprint: Any = None  # device tensor, kept for the first training batches
    loss: Any = None  # the scalar `loss` the module returned (a Hugging Face model's), detached
    reached: bool = False
    tokens: int | None = None  # an integer [B, T] batch (token ids): B x T
    generated: bool = False  # its input is another recorded forward's output (or a view or detach of it)
    batch: Any = None  # _Batch of its input: which tensor it was fed


@dataclass(frozen=True)
class _Batch:
    """A forward's input tensor, as far as telling "the same batch again" needs: where its data starts, its shape
    and type, its version (in-place writes count up), and a weak reference (the tensor is not kept alive; a dead one
    matches nothing)."""

    key: tuple[Any, ...]  # address, shape, dtype, version
    tensor: Any  # weakref.ref to the tensor

    @classmethod
    def of(cls, tensor: torch.Tensor | None) -> "_Batch | None":
        if tensor is None:
            return None
        try:
            key = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype, tensor._version)
            return cls(key, weakref.ref(tensor))
        except Exception:  # a tensor without data (meta, fake) or one Python cannot refer to weakly
            return None

    def again(self, earlier: "_Batch") -> bool:
        return earlier.tensor() is not None and self.key == earlier.key


@dataclass
class Counts:
    micro_batches: int = 0
    samples: int | None = 0  # None once one micro-batch's size is unknown
    output_loss: Any = None  # sum of the losses the model returned (to tell a loss the script scaled afterwards)
    tokens: int | None = 0  # token ids in the micro-batches' [B, T] integer batches; None once one had none
    loaders: set[int] = field(default_factory=set)
    batches: list[_Batch] = field(default_factory=list)  # inputs of the micro-batches counted (their first module)


class ForwardTracker:
    def __init__(self, on_error: Callable[[str], None]) -> None:
        self.on_error = on_error
        self.order = 0
        self.in_backward = False
        self.reached: list[Forward] = []  # by the backward in progress
        self.reached_any = False  # this backward reached a forward (new or not)
        self.counts = Counts()
        self.first_trained: list[Forward] = []  # the first training forwards, for their fingerprints
        self.trained: set[int] = set()  # ids of the modules whose forwards a backward reached
        self.layout: Any = None  # sequence.BatchLayout: which dimension is the batch
        self.outputs: list[tuple[weakref.ref[Any], int]] = []  # this step's forward outputs' storages
        self.drawn: int | None = 0  # samples the loaders gave since the last backward (None: a batch unreadable)

    @staticmethod
    def batch_size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
        batch = first_tensor((args, kwargs))
        return int(batch.shape[0]) if batch is not None and batch.dim() > 0 else None

    def _samples(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], loader: int | None) -> int | None:
        """The batch size, in the dimension the model's convention says (sequence.py), else the leading one."""
        batch = first_tensor((args, kwargs))
        if batch is None or batch.dim() == 0:
            return None
        return int(batch.shape[self.layout.batch_dim(module, batch, loader) if self.layout is not None else 0])

    def forward(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any,
                loader: int | None, fingerprint: Callable[[], Any] | None) -> None:  # fmt: skip
        """A top-level call with grad enabled returned `output`: hook the autograd nodes of its tensors."""
        nodes = {id(node): node for tensor in tensors(output) if (node := tensor.grad_fn) is not None}
        if not nodes:
            return  # nothing a backward could reach (a frozen model, an output detached)
        self.order += 1
        record = Forward(self.order, id(module), self._samples(module, args, kwargs, loader), loader)
        record.generated = self._is_an_output(first_tensor((args, kwargs)))
        record.batch = _Batch.of(first_tensor((args, kwargs)))
        self._remember(output)
        if fingerprint is not None:
            record.fingerprint = fingerprint()
        batch = first_tensor((args, kwargs))
        if batch is not None and batch.dim() == 2 and not batch.is_floating_point() and batch.dtype != torch.bool:
            record.tokens = int(batch.numel())
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            record.loss = loss.detach().reshape(())
        for node in nodes.values():
            node.register_prehook(self._hook(record))

    def _remember(self, output: Any) -> None:
        """The storage of the forward's output tensors, while it lives (a weak reference to the storage, not to the
        tensor: `generator(z).detach()` drops the output tensor at once and keeps its storage, which is what a
        discriminator is then fed; none kept alive)."""
        for tensor in tensors(output):
            if len(self.outputs) < MAX_OUTPUTS and (found := _held(tensor)) is not None:
                held, storage = found
                try:
                    self.outputs.append((weakref.ref(held), storage))
                except TypeError:  # a storage Python cannot refer to weakly: the tensor, as long as it lives
                    self.outputs.append((weakref.ref(tensor), storage))

    def _is_an_output(self, batch: torch.Tensor | None) -> bool:
        storage = _storage(batch) if batch is not None else None
        return storage is not None and any(ref() is not None and seen == storage for ref, seen in self.outputs)

    def _hook(self, record: Forward) -> Callable[..., None]:
        def reached(grad_outputs: Any) -> None:
            try:
                if self.in_backward:
                    self.reached_any = True
                    if not record.reached:
                        record.reached = True
                        self.reached.append(record)
            except Exception as error:  # never into the autograd engine
                self.on_error(f"backward hook: {type(error).__name__}: {error}")

        return reached

    def backward_started(self) -> None:
        self.settle()
        self.in_backward = True

    def backward_ended(self, *args: Any, **kwargs: Any) -> None:
        self.settle()

    def drew(self, batch: Any) -> None:
        """A loader gave `batch`: its samples, by the leading dimension of its first tensor."""
        first = first_tensor(batch)
        size = int(first.shape[0]) if first is not None and first.dim() > 0 else None
        self.drawn = None if size is None or self.drawn is None else self.drawn + size

    def settle(self) -> None:
        """Count what the last backward reached (micro-batch and samples). Its samples are the batch sizes of the
        first module's forwards on data; where several such forwards count more than the loaders gave since the
        previous backward (a conditional GAN's discriminator on two concatenations of one batch, a siamese pair),
        the loaders' count: the samples are the data's, however many times a model sees them."""
        if not self.in_backward:
            return
        self.in_backward = False
        drawn, self.drawn = self.drawn, 0
        reached, self.reached = self.reached, []
        reached_any, self.reached_any = self.reached_any, False
        if not reached:
            if not reached_any:  # no model output seen on its way (a model called through .forward): unknown size
                self.counts.micro_batches += 1
                self.counts.samples = None
                self.counts.tokens = None
            return
        self.trained.update(record.module for record in reached)
        if all(record.generated for record in reached):
            return  # trained on another model's output alone (generated samples), no data: not a micro-batch
        # the first module called on data, and its forwards on data: a discriminator's on generated samples (a GAN's
        # loss on the batch and on the generator's output in one backward) are not more samples of the batch
        on_data = [record for record in reached if not record.generated]
        first = min(on_data, key=lambda record: record.order).module
        data = [record for record in on_data if record.module == first]
        if drawn == 0 and self._counted_already(data):
            return  # the same batch again (SAM's second pass): one micro-batch, counted at its first backward
        self.counts.micro_batches += 1
        self.counts.batches += [record.batch for record in data if record.batch is not None]
        sizes = [record.samples for record in data]
        samples = None if any(size is None for size in sizes) else sum(sizes)  # type: ignore[misc]
        if samples is not None and len(data) > 1 and drawn and samples > drawn:
            samples = drawn  # pix2pix's D on cat(a, fake_b).detach() and cat(a, b): one batch, not two
        self.counts.samples = None if samples is None or self.counts.samples is None else self.counts.samples + samples
        tokens = [record.tokens for record in data]
        known = None if any(count is None for count in tokens) else sum(tokens)  # type: ignore[misc]
        self.counts.tokens = None if known is None or self.counts.tokens is None else self.counts.tokens + known
        for record in reached:
            if record.module == first and record.loss is not None:
                loss = self.counts.output_loss
                self.counts.output_loss = record.loss if loss is None else loss + record.loss
        self.counts.loaders.update(record.loader for record in reached if record.loader is not None)
        self.first_trained += [record for record in data if record.fingerprint is not None]

    def _counted_already(self, data: list[Forward]) -> bool:
        """Every forward on data fed a batch that a micro-batch of this step already counted."""
        return all(
            record.batch is not None and any(record.batch.again(earlier) for earlier in self.counts.batches)
            for record in data
        )

    def take(self) -> Counts:
        """The counts since the last optimizer step (and start anew)."""
        self.settle()
        counts, self.counts = self.counts, Counts()
        self.outputs.clear()
        return counts
