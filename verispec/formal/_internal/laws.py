"""The law of one output sequence, read off the merged branch tree, as a z3 term."""

from __future__ import annotations

import z3

__all__ = ["law_term", "zero_if_none"]


def law_term(node, output, memo, region):
    """law(output) below `node` as a z3 term, or None where it is 0 for every pair.

    region: {condition AST id: truth value} fixed by the query splitting (`CellSplitter`): a decision
    node whose condition is fixed contributes only its branch.
    """
    if output not in node.emitted:
        return None
    key = id(node)
    if key in memo:
        return memo[key]
    if node.kind == "leaf":
        term = z3.RealVal(1)
    elif node.kind == "decide":
        fixed = region.get(node.payload.get_id())
        if fixed is not None:
            child = node.children.get(0 if fixed else 1)
            term = None if child is None else law_term(child, output, memo, region)
        elif len(node.children) == 1:
            term = law_term(next(iter(node.children.values())), output, memo, region)
        else:
            true, false = (law_term(node.children[c], output, memo, region) for c in (0, 1))
            term = None if true is None and false is None else z3.If(
                node.payload, zero_if_none(true), zero_if_none(false))
    else:  # chance
        terms = [node.payload[c] * t for c, child in node.children.items()
                 if (t := law_term(child, output, memo, region)) is not None]
        term = terms[0] if len(terms) == 1 else z3.Sum(terms) if terms else None
    memo[key] = term
    return term


def zero_if_none(term):
    """`term`, or the z3 real 0 for None (a law that is 0 for every pair)."""
    return z3.RealVal(0) if term is None else term

