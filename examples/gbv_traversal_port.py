"""A port of the GBV authors' `TreeVerifier.traversal_verify`, and verispec refuting it.

Source (read, not copied): the public code of "Greedy Multi-Path Block Verification" (Thomas &
Pal 2026, arXiv 2602.16961), `verifier.py::TreeVerifier.traversal_verify` and the node ordering
of `util.py::target_tree_pass`. That function implements traversal verification (Weng et al.
2025, arXiv 2505.12398) on the tree of K i.i.d. draft paths. It is NOT lossless:

- tree nodes are indexed in the order their prefixes first appear when the paths are read one
  after another (`q_prefixes`), and the next leaf is `self.nodes[min(leaves)]`: the leaf whose
  prefix appeared first, which is not depth-first order;
- after a rejected leaf it updates the parent's weight and target and then recomputes the weight
  of EVERY descendant of the parent from the parent's current values. With paths ab, cd, ae the
  leaves come ab, cd, ae: rejecting ab updates a; rejecting cd then c (whose turn comes before
  ae) updates the root and recomputes a's weight from the root, dropping a's own update. The rule
  then accepts too much.

Taking leaves in depth-first order (children in order of first appearance) fixes it: the law is
then exactly that of `verispec.reference.verifiers.traversal_verify`.

Usage::

    python examples/gbv_traversal_port.py      # prints an exact counterexample

Everything here is written for verispec: numpy arrays (float64 or exact Fractions) in place of
torch tensors, and verispec's `rand` in place of `random.random` / `torch.multinomial`.
"""

from __future__ import annotations

import numpy as np

from verispec.reference import drafters
from verispec.reference.methods import Method

ROOT_TOKEN = 0  # the "pending" token the public code puts at the start of every path


class Node:
    """A distinct prefix of the draft tree (the public code's `node.Node`)."""

    def __init__(self, idx: int, rep: str, token: int, depth: int):
        self.idx, self.rep, self.token, self.depth = idx, rep, token, depth
        self.parent = None
        self.children = []  # duplicates kept when paths overlap, as in the public code
        self.weight = 1


def prefixes_in_order(q_paths):
    """`target_tree_pass`'s node order: prefixes of path 0, then new prefixes of path 1, ..."""
    out = []
    for path in q_paths:
        for i in range(len(path)):
            rep = ",".join(str(x) for x in path[:i + 1])
            if rep not in out:
                out.append(rep)
    return out


class TreeVerifier:
    """The public `TreeVerifier` restricted to traversal verification.

    Args:
        q_paths: K lists [ROOT_TOKEN, x_1, ..., x_L]. p_probs, q_probs: {rep: [V] array} target and
            draft distributions after each prefix. leaf_order: "first_appearance" (the public
            code: `min(leaves)`) or "depth_first" (the fix).
    """

    def __init__(self, q_paths, p_probs, q_probs, leaf_order: str = "first_appearance"):
        self.q_paths = q_paths
        self.L = len(q_paths[0]) - 1
        self.q_prefixes = prefixes_in_order(q_paths)
        self.p_probs_dict = dict(p_probs)  # the public code mutates the caller's dicts; we copy
        self.q_probs_dict = dict(q_probs)
        self.leaf_order = leaf_order
        self.nodes = []
        for idx, rep in enumerate(self.q_prefixes):
            parts = rep.split(",")
            self.nodes.append(Node(idx, rep, int(parts[-1]), len(parts) - 1))
        for path in q_paths:  # one edge per path and depth, duplicates included
            prefix = str(path[0])
            for i in range(1, self.L + 1):
                parent = self.q_prefixes.index(prefix)
                prefix += "," + str(path[i])
                child = self.q_prefixes.index(prefix)
                self.nodes[parent].children.append(self.nodes[child])
                self.nodes[child].parent = self.nodes[parent]

    def _child_weight(self, node):
        p_parent = self.p_probs_dict[node.parent.rep]
        q_parent = self.q_probs_dict[node.parent.rep]
        q_tok = q_parent[node.token]
        return min(1, node.parent.weight * (p_parent[node.token] / q_tok)) if q_tok > 0 else 0

    def _next_leaf(self, leaves):
        if self.leaf_order == "first_appearance":
            return self.nodes[min(leaves)]  # the public code's choice
        stack = [self.nodes[0]]  # depth first, children in order of first appearance
        while stack:
            node = stack.pop()
            if node.idx in leaves:
                return node
            kids = list(dict.fromkeys(node.children))
            stack.extend(reversed(kids))
        raise AssertionError("no leaf reachable from the root")

    def traversal_verify(self, rand):
        """Returns (accepted Node, extra token): the public function, step for step."""
        leaves = []
        for node in self.nodes:
            node.weight = 1
            if node.parent is not None:
                node.weight = self._child_weight(node)
            if node.children == []:
                leaves.append(node.idx)
        while leaves:
            first_leaf = self._next_leaf(leaves)
            if first_leaf.parent is None or rand.bernoulli(first_leaf.weight):
                return first_leaf, rand.categorical(self.p_probs_dict[first_leaf.rep])
            # Reject: remove the leaf, update the parent's weight, target and draft.
            parent = first_leaf.parent
            leaves.remove(first_leaf.idx)
            parent.children = [c for c in parent.children if c.rep != first_leaf.rep]
            if parent.children == []:
                leaves.append(parent.idx)
            first_leaf.parent = None
            p, q = self.p_probs_dict[parent.rep], self.q_probs_dict[parent.rep]
            parent.weight = min(parent.weight, 1)
            p_prime = np.maximum(parent.weight * p - q, 0 * q)  # [V]
            s = p_prime.sum()
            if s > 0:
                parent.weight = s / (s + 1 - parent.weight)
                self.p_probs_dict[parent.rep] = p_prime / s
            else:
                parent.weight = 0
            q_rest = q.sum() - q[first_leaf.token]
            q_new = q / q_rest if q_rest > 0 else q.copy()
            q_new[first_leaf.token] = 0
            self.q_probs_dict[parent.rep] = q_new
            # Recompute the weight of every descendant of the parent, in node order.
            for desc in self.nodes:
                if desc.rep.startswith(parent.rep + ",") and desc.parent is not None:
                    desc.weight = self._child_weight(desc)
        return first_leaf, rand.categorical(self.p_probs_dict[first_leaf.rep])


def _verify(leaf_order):
    def verify(target, draft_model, context, draft, rand):
        q_paths = [[ROOT_TOKEN, *path] for path in draft.paths]
        reps = prefixes_in_order(q_paths)
        nodes = {rep: tuple(int(t) for t in rep.split(",")[1:]) for rep in reps}
        p_probs = {rep: target.probs(context + node) for rep, node in nodes.items()}
        q_probs = {rep: draft.proposal(node) for rep, node in nodes.items() if len(node) < len(q_paths[0]) - 1}
        node, token = TreeVerifier(q_paths, p_probs, q_probs, leaf_order).traversal_verify(rand)
        return nodes[node.rep] + (int(token),)

    verify.__name__ = f"gbv_code_traversal_{leaf_order}"
    return verify


def gbv_code_traversal(draft_length: int, num_paths: int, leaf_order: str = "first_appearance") -> Method:
    """The ported public traversal verifier on K i.i.d. paths, as a verispec Method."""
    return Method(f"gbv_code_traversal[{leaf_order}]", drafters.iid_paths(draft_length, num_paths),
                  _verify(leaf_order), {"draft_length": draft_length, "num_paths": num_paths},
                  model_state_only=True)


def main() -> None:
    from verispec.reference import exact, methods, models

    V, L, K, seed = 3, 2, 3, 4
    target = models.random_tree(V, 2 * seed, rational=True, denominator=16)
    draft = models.random_tree(V, 2 * seed + 1, rational=True, denominator=16)
    ported = gbv_code_traversal(L, K)
    fixed = gbv_code_traversal(L, K, "depth_first")
    reference = methods.traversal(L, K)
    truth = exact.target_distribution(target, (), 1)
    for name, method in (("public code (min(leaves))", ported), ("depth-first fix", fixed),
                         ("verispec traversal", reference)):
        first = exact.output_distribution(target, draft, method, (), 1)
        tau = exact.expected_accepted_length(target, draft, method)
        print(f"{name:28s} E[tau] = {float(tau):.6f}  TV(first token, p) = "
              f"{float(exact.total_variation(first, truth)):.6f}")


if __name__ == "__main__":
    main()
