"""Where a stage's planned requests are cut into Ray Data blocks (pure: no Ray, no I/O).

The input is a run's prompts in plan order (after dedup and GGR); the output a list of blocks,
each a list of request positions. Ray Data gives every block to whichever replica actor is
free, so a prefix group's KV cache is reused only inside a block: a group cut across two
blocks pays its shared prefix again on every other replica its pieces land on.

Invariants of `cut_blocks(prompts, block_rows, by)`:
- every position 0..n-1 is in exactly one block; blocks are contiguous runs in plan order and
  listed in plan order (concatenated they give 0..n-1), none is empty;
- `by="default"`: what Ray Data does with a table it is given: `ceil(n / block_rows)` blocks
  of near-equal row counts (`numpy.array_split`'s cut, as `ray.data.from_items` cuts), cut
  wherever the count falls, inside prefix groups or not;
- `by="groups"`: whole prefix groups (`resources.openai.placement.prefix_groups`, the fleet
  planner's own grouping) packed in plan order into blocks of at most `block_rows` rows; a
  group is cut only when it alone has more than `block_rows` rows, then into
  `ceil(len / block_rows)` near-equal contiguous pieces (so no block mixes a piece of a cut
  group with another group). A block never ends inside a group it could have held whole.

>>> movie = "Q: " + "a " * 40  # two KV blocks its prompts share
>>> prompts = [movie + "1", movie + "2", movie + "3", "Q: b", "Q: c"]
>>> cut_blocks(prompts, 2, "default")
[[0, 1], [2, 3], [4]]
>>> cut_blocks(prompts, 3, "groups")
[[0, 1, 2], [3, 4]]
>>> cut_blocks(prompts, 2, "groups")  # the group of 3 is larger than a block
[[0, 1], [2], [3, 4]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from resources.openai.placement import prefix_groups

__all__ = ["BLOCKS_PER_REPLICA", "BlockBy", "block_groups_split", "cut_blocks", "default_rows"]

BlockBy = Literal["groups", "default"]

BLOCKS_PER_REPLICA = 4
"""Default blocks per replica actor: enough that a replica done early takes another block
(Ray Data's dynamic balance), few enough that most groups fit in a block whole."""


def default_rows(n: int, replicas: int, blocks_per_replica: int = BLOCKS_PER_REPLICA) -> int:
    """The default rows per block for `n` requests over `replicas` actors (at least 1)."""
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    return max(1, math.ceil(n / (replicas * blocks_per_replica)))


def _even(positions: list[int], pieces: int) -> list[list[int]]:
    """`positions` cut into `pieces` contiguous runs whose lengths differ by at most one (the
    first ones longer), as `numpy.array_split` cuts."""
    size, extra = divmod(len(positions), pieces)
    out, at = [], 0
    for k in range(pieces):
        take = size + (1 if k < extra else 0)
        out.append(positions[at : at + take])
        at += take
    return [run for run in out if run]


def cut_blocks(prompts: Sequence[str], block_rows: int, by: BlockBy = "groups") -> list[list[int]]:
    """The blocks of `prompts` (see the module invariants). ValueError for `block_rows < 1`
    or an unknown `by`."""
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    if by not in ("groups", "default"):
        raise ValueError(f"unknown block_by {by!r}; expected 'groups' or 'default'")
    n = len(prompts)
    if not n:
        return []
    if by == "default":
        return _even(list(range(n)), math.ceil(n / block_rows))
    groups = prefix_groups(list(prompts))
    members: list[list[int]] = []
    for i, g in enumerate(groups):
        if i and g == groups[i - 1]:
            members[-1].append(i)
        else:
            members.append([i])
    blocks: list[list[int]] = []
    current: list[int] = []
    for group in members:
        if len(group) > block_rows:  # too big for any block: its own near-equal pieces
            if current:
                blocks.append(current)
                current = []
            blocks.extend(_even(group, math.ceil(len(group) / block_rows)))
            continue
        if len(current) + len(group) > block_rows:
            blocks.append(current)
            current = []
        current = current + group
    if current:
        blocks.append(current)
    return blocks


def block_groups_split(prompts: Sequence[str], blocks: Sequence[Sequence[int]]) -> int:
    """How many prefix groups of `prompts` span more than one of `blocks` (the groups whose
    shared prefix may be paid again on another replica)."""
    groups = prefix_groups(list(prompts))
    block_of = {i: b for b, block in enumerate(blocks) for i in block}
    spans: dict[int, set[int]] = {}
    for i, g in enumerate(groups):
        spans.setdefault(g, set()).add(block_of[i])
    return sum(1 for s in spans.values() if len(s) > 1)
