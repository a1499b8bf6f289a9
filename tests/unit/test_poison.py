"""The sandbox's poisoned allocations (tools/harness/sandbox.py Poison): torch.empty* come back
filled with NaN or a sentinel, so an output a kernel never writes fails the check."""

import torch

from accelopt.tools.harness.sandbox import Poison


def test_allocations_are_poisoned_while_active_and_restored_after():
    with Poison(torch):
        floats, ints = torch.empty(4), torch.empty_like(torch.zeros(3, dtype=torch.int32))
    assert torch.isnan(floats).all() and (ints == torch.iinfo(torch.int32).max).all()
    assert torch.empty is Poison(torch).saved["empty"]


def test_a_leaf_that_requires_grad_is_poisoned_not_an_error():
    # Inductor allocates such leaves while it compiles (pad_mm's pattern init): on an H100 the
    # torch.compile comparator failed with "a leaf Variable that requires grad is being used in an
    # in-place operation" before this was filled under no_grad.
    with Poison(torch):
        leaf = torch.empty(3, requires_grad=True)
    assert leaf.requires_grad and leaf.is_leaf and torch.isnan(leaf.detach()).all()
