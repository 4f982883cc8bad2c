"""Tell the tracker which transformer block and which module inside it is running.

Global module hooks (``torch.nn.modules.module.register_module_forward_pre_hook`` and
``register_module_forward_hook``) keep a stack of running modules; they fire again when
activation checkpointing recomputes a block in backward.
"""

from __future__ import annotations

import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)


class ModuleLabels:
    """Context manager: while active, ``lb.layer`` / ``lb.module`` follow the running module."""

    def __init__(self, model: torch.nn.Module, blocks: list[torch.nn.Module], lb) -> None:
        self.lb = lb
        self.where: dict[int, tuple[int | None, str]] = {}
        block_of = {id(b): i for i, b in enumerate(blocks)}
        for i, b in enumerate(blocks):
            for name, m in b.named_modules():
                self.where[id(m)] = (i, name)
        for name, m in model.named_modules():
            self.where.setdefault(id(m), (None, name.split(".")[-1] if name else "model"))
        self._block_of = block_of
        self.stack: list[tuple[int | None, str]] = []
        self.handles: list = []

    def _pre(self, module, args) -> None:
        here = self.where.get(id(module))
        if here is None:
            return
        self.stack.append((self.lb.layer, self.lb.module))
        self.lb.layer, self.lb.module = here

    def _post(self, module, args, out) -> None:
        if id(module) in self.where and self.stack:
            self.lb.layer, self.lb.module = self.stack.pop()

    def __enter__(self) -> "ModuleLabels":
        self.handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self.handles:
            h.remove()
        self.lb.layer, self.lb.module = None, ""
