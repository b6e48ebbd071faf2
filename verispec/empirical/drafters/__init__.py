"""Drafters of the torch engine: each proposes one draft tree per step for `engine.decode`.

base (the `Drafter` protocol, `DraftTree`, chain / K-path / prompt-lookup drafters,
`probabilities`), tree (`TreeDrafter`: OPT-Tree and static tree shapes), hub_pairs (SpecHub's
ordered draft pairs), greedy_paths (Hu et al.'s greedy drafts), lookup (prompt-lookup n-gram matches
on tensors), adaptive (adaptive-length and hybrid chains), phrases (Ouroboros and lookahead phrase pools).

`adaptive` and `phrases` build whole `TorchMethod`s on the engine, which imports this package, so
they are imported by their own path, not from here: the import graph stays a tree.
"""

from .base import (DraftTree, Drafter, ModelDrafter, PathsDrafter, PromptLookupDrafter, RootOnly, draw,
                   next_token_law, probabilities)
from .greedy_paths import GreedyDraftDrafter, greedy_draft
from .hub_pairs import HubPairsDrafter, hub_pair
from .lookup import prompt_lookup_batch, prompt_lookup_draft
from .tree import EAGLE_RANK_PRIOR, TREES, TreeDrafter, TreeRecords, draft_tree, static_shape

__all__ = ["DraftTree", "Drafter", "ModelDrafter", "PathsDrafter", "PromptLookupDrafter", "RootOnly",
           "probabilities", "next_token_law", "draw", "HubPairsDrafter", "hub_pair", "GreedyDraftDrafter",
           "greedy_draft", "prompt_lookup_draft", "prompt_lookup_batch", "TREES", "EAGLE_RANK_PRIOR", "TreeRecords",
           "TreeDrafter", "static_shape", "draft_tree"]
