"""Activation offloading as torchtune runs it (``enable_activation_offloading``), with host bytes kept apart.

torchtune's ``OffloadActivations`` (torchtune/training/_activation_offloading.py, bd2a0fc7, 2026-04) is a
``saved_tensors_hooks`` pair entered around the model's forward (the recipe's ``activations_handling_ctx``),
with a no-op pair around the output head, so the loss and the head keep their tensors on the device. Its
pack hook moves every saved tensor of at least ``min_offload_size`` = 1024 bytes that is not a parameter or
buffer to pinned host memory; with ``use_streams=True`` (the recipe's default) the copy runs on a side
stream and the last ``max_fwd_stash_size`` = 5 offloaded device tensors are kept alive (``fwd_stash``) until
the copy is surely done. In backward the unpack hook brings a tensor back (``.to(device)``) unless it is
still in the forward stash; a brought-back tensor stays referenced (``bwd_tensor_stash``) until the next
autograd node that unpacks a tensor has run, and all are dropped when the backward ends.

This module is that class with the CUDA streams and events taken out: on one timeline an event is always
complete, so each ``wait_event`` followed by ``del`` becomes the ``del`` alone. Which tensors are offloaded,
and which references keep device memory alive and for how long, follow the original line by line.

Host copies are fake tensors like the rest; each is marked ``host`` in the tracker (``LiveBytes``), so it
is left out of the device columns and counted in ``host_bytes``. Bringing a tensor back allocates a fresh
device tensor (``empty_like`` + ``copy_``), as ``.to('cuda')`` does. On a real CUDA device the same code
copies to pinned host memory and back.

torchtune requires activation checkpointing with offloading; with ``checkpointing='full'`` the checkpointed
blocks' saved tensors are the checkpoint's own (its inner hooks win), so what is offloaded is each block's
inputs (hidden states, rotary cos/sin) and the tensors saved outside the blocks (embedding, final norm).
"""

from __future__ import annotations

import torch
from torch.autograd.graph import saved_tensors_hooks
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

MIN_OFFLOAD_BYTES = 1024  # torchtune default min_offload_size
MAX_FWD_STASH = 5  # torchtune default max_fwd_stash_size


def _tracker():
    """The LiveBytes tracker on the dispatch-mode stack, if any (to mark host copies)."""
    from engine.checks.measure.tracker import LiveBytes

    return next((m for m in _get_current_dispatch_mode_stack() if isinstance(m, LiveBytes)), None)


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A host copy of ``t``: pinned CPU memory for a CUDA tensor, else a tracker-marked host tensor."""
    if t.device.type == "cuda":
        host = torch.empty_like(t, device="cpu", pin_memory=True)
        host.copy_(t, non_blocking=True)
        return host
    host = torch.empty_like(t)
    host.copy_(t)
    lb = _tracker()
    rec = lb.record_of(host) if lb is not None else None
    if rec is not None:
        rec.host = True
    return host


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host.to(device)``: a fresh device tensor (emulated for host-marked fake/CPU tensors)."""
    if device.type == "cuda":
        return host.to(device, non_blocking=True)
    back = torch.empty_like(host)
    back.copy_(host)
    return back


class OffloadActivations(saved_tensors_hooks):
    """torchtune's ``OffloadActivations(use_pin_memory=True, use_streams=True)`` on one timeline."""

    def __init__(self) -> None:
        self.tracker: dict[int, tuple[torch.Tensor, bool, torch.device]] = {}
        self.tensor_id = 0
        self.is_first_backward_call = True
        self.fwd_stash: dict[int, torch.Tensor] = {}
        self.bwd_tensor_stash: dict[int, torch.Tensor] = {}
        self.curr_graph_id = None
        self.curr_autograd_node = None
        super().__init__(self._pack, self._unpack)

    @staticmethod
    def _offloadable(t: torch.Tensor) -> bool:
        """torchtune's test: on the accelerator, at least 1024 bytes, not a parameter or buffer."""
        lb = _tracker()
        rec = lb.record_of(t) if lb is not None else None
        on_device = t.device.type == "cuda" or rec is None or not rec.host
        return (on_device and t.element_size() * t.nelement() >= MIN_OFFLOAD_BYTES
                and not isinstance(t, (torch.nn.Parameter, torch.nn.Buffer)))

    def _pack(self, activation: torch.Tensor) -> int:
        self.is_first_backward_call = True
        self.tensor_id += 1
        tid = self.tensor_id
        if not self._offloadable(activation):
            self.tracker[tid] = (activation, False, activation.device)
            return tid
        for old in [k for k in self.fwd_stash if k <= tid - MAX_FWD_STASH]:
            del self.fwd_stash[old]  # s0.wait_event(ev); del: the copy is done
        self.tracker[tid] = (to_host(activation), True, activation.device)
        self.fwd_stash[tid] = activation  # kept alive until the side-stream copy is done
        return tid

    def _unpack(self, tid: int) -> torch.Tensor:
        if self.is_first_backward_call:
            self.is_first_backward_call = False
            self.curr_graph_id = torch._C._current_graph_task_id()
            torch.autograd.variable.Variable._execution_engine.queue_callback(self.bwd_tensor_stash.clear)
        t, modified, device = self.tracker.pop(tid)
        if not modified:
            return t
        graph_id, node = torch._C._current_graph_task_id(), torch._C._current_autograd_node()
        prev_ids = []
        if graph_id == self.curr_graph_id and self.curr_autograd_node != node:
            self.curr_autograd_node = node
            prev_ids = list(self.bwd_tensor_stash)
        brought_back = tid not in self.fwd_stash
        if brought_back:
            t = to_device(t, device)
            self.bwd_tensor_stash[tid] = t
            refs = torch._C._storage_Use_Count(t.untyped_storage()._cdata)
        else:
            t = self.fwd_stash[tid]

        def hook(outputs, inputs):  # holds no reference to the tensor: it finds it in the stash, as torchtune
            back = self.bwd_tensor_stash.get(tid) if brought_back else None
            if back is not None and torch._C._storage_Use_Count(back.untyped_storage()._cdata) > refs:
                del self.bwd_tensor_stash[tid]  # record_stream(s0): freed with its last reference
            del back
            self.fwd_stash.clear()  # in backward now: the forward stash is dropped
            for i in prev_ids:
                self.bwd_tensor_stash.pop(i, None)  # the previous node is done with its tensors
            return outputs

        if node is not None:
            node.register_hook(hook)
        return t


def apply(model: torch.nn.Module) -> OffloadActivations:
    """Offload what the decoder (every module but the LM head and the loss) saves, as torchtune's recipe does."""
    base = getattr(model, "get_base_model", lambda: model)()
    decoder = base.base_model  # LlamaModel / Qwen2Model / GPT2Model: everything before the output head
    ctx = OffloadActivations()
    decoder.register_forward_pre_hook(lambda *_: ctx.__enter__())
    decoder.register_forward_hook(lambda *_: ctx.__exit__(None, None, None), always_call=True)
    return ctx
