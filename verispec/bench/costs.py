"""The host's measured cost model for the drafting policy: draft and target forward seconds against
token rows and cache length, measured once per (model pair, device, CPU model, dtype, speed levers,
threads, library versions), cached on disk and recorded in the bench JSON.

`measure_costs(target, draft, ...)` times forwards through the engine's own KV interface
(`verispec.empirical.kv`: the appends a decode makes, the attention masks included): after a
prefill of n deterministic token ids, one append of r rows (a chain), timed, then dropped
(commit of nothing), at several n, for the draft's row counts `DRAFT_ROWS` and the target's
`TARGET_ROWS`, `repeats` times each after one untimed warm-up append. The fit is
`verispec.reference.costs.CostModel.fitted` (piecewise-linear in rows, linear in n); the raw
samples stay in the model.

`CostModels` is one bench run's store: for each policy-"auto" method it returns the cost model of
that method's levers (``dq=8``: the int8 draft; ``dv=k``: the draft's head over the k lowest ids
and the added tokens; ``lin=``: the target's GEMM layout), loading it from
``<cache>/costs/<key hash>.json`` (`verispec.bench.weights.cache_dir`: ``$VERISPEC_CACHE`` or the
platformdirs user cache; ``$VERISPEC_COST_CACHE`` names another folder for the cost models alone)
or measuring and caching it. Delete that folder (or pass ``refresh``) to measure again.

A cached model is checked before it is used (`spot_check`): a few draft forwards of one row and
target forwards of `SPOT_TARGET_ROWS` rows at `SPOT_LENGTH` cached positions are timed now and set
against the model's prediction. A host whose speed has changed since the model was measured (a
virtual machine moved to other hardware, another power profile, a library built otherwise) gives
a ratio outside [1 / (1 + tolerance), 1 + tolerance], and the model is measured again: a policy
fed last month's costs drafts for a machine it no longer runs on. Each check is kept
(`CostModels.checks`) and the bench records it. Timings are only meaningful on a quiet machine
(docs/real_models.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, replace

import torch

from ..atomic import write_json_atomic
from ..empirical.kv import new_kv
from ..empirical.speedups.hardware import cpu_name, host_info
from ..empirical.speedups.linear_layout import model_layout
from ..reference.costs import CostModel
from .spec import BenchMethod, draft_vocabulary, parse_method
from .weights import cache_dir

__all__ = ["COST_CACHE_ENV", "DRAFT_ROWS", "TARGET_ROWS", "CACHE_LENGTHS", "COST_SCHEMA", "CostGrid", "measure_costs",
           "time_appends", "cost_key", "CostModels", "recorded_spec", "spot_check", "SPOT_TARGET_ROWS", "SPOT_LENGTH",
           "DRIFT_TOLERANCE"]

#: Row counts of the timed draft forwards (1: a chain step; more: guesses and tree layers).
DRAFT_ROWS = (1, 2, 3, 4, 6, 8, 12, 16)
#: Row counts of the timed target forwards (a chain of L tokens is verified by L + 1 rows;
#: non-powers of two too, since a kernel's cost need not be monotone in the rows).
TARGET_ROWS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 16, 17, 21, 24, 32)
#: Cache lengths the forwards attend to (HumanEval prompts are 38-391 tokens, plus what is generated).
CACHE_LENGTHS = (64, 256, 512)
#: Version of the measurement; part of the cache key, so a change of method measures again.
COST_SCHEMA = 1
#: An environment variable naming the cost models' folder (default: <verispec cache>/costs).
COST_CACHE_ENV = "VERISPEC_COST_CACHE"
#: The spot check of a cached model: target rows (a chain of 7-8 drafted tokens plus its bonus
#: row, what a decode verifies most often) and the cache length, both among the measured ones.
SPOT_TARGET_ROWS, SPOT_LENGTH = 8, 256
#: A cached model whose spot check is off by more than this fraction, either way, is measured
#: again: above the run-to-run spread of a median of a few forwards on a quiet host, below the
#: drift a moved virtual machine shows (a cached one-row int8 draft forward of 39 ms that ran at
#: 52 ms a session later, 33% slower).
DRIFT_TOLERANCE = 0.25


@dataclass(frozen=True)
class CostGrid:
    """What `measure_costs` times: the cache lengths, the draft's and the target's row counts, and
    the timed forwards per (rows, cache length) after one untimed warm-up.

    Raises:
        ValueError: no cache length or row count, or repeats < 1.
    """

    lengths: tuple = CACHE_LENGTHS
    draft_rows: tuple = DRAFT_ROWS
    target_rows: tuple = TARGET_ROWS
    repeats: int = 3

    def __post_init__(self):
        if not (self.lengths and self.draft_rows and self.target_rows) or self.repeats < 1:
            raise ValueError(f"grid: expected cache lengths, row counts and repeats >= 1, got {self}")


def time_appends(model, rows, lengths, repeats: int, cuda: bool) -> list:
    """[(r, n, seconds)]: for each cache length n in `lengths` and row count r in `rows`, `repeats`
    timed engine appends (`verispec.empirical.kv`, a chain of r deterministic token ids after a
    prefill of n), each after one untimed warm-up and dropped after timing. `cuda`: synchronize
    around each append. `model`: a `CausalLM` (any view: int8, head subset)."""
    samples = []
    V = model.vocab_size
    for n in lengths:
        kv = new_kv("sequence", model, 1)
        prompt = (torch.arange(n, device=model.device) * 7919 % V).unsqueeze(0)  # [1, n] deterministic ids
        kv.prefill(prompt, torch.tensor([n], device=model.device))
        for r in rows:
            tokens = (torch.arange(r, device=model.device) * 104729 % V).unsqueeze(0)  # [1, r]
            parents = (torch.arange(r, device=model.device) - 1).unsqueeze(0)  # [1, r]: a chain
            real = torch.ones(1, r, dtype=torch.bool, device=model.device)
            for attempt in range(repeats + 1):  # the first is a warm-up
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                kv.append(tokens, parents, real)
                if cuda:
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - start
                kv.commit(torch.zeros(1, r, dtype=torch.bool, device=model.device))  # drop the appended rows
                if attempt:
                    samples.append((r, n, seconds))
    return samples


def measure_costs(target, draft, key=(), *, layout: str = "xw", grid: CostGrid = CostGrid()) -> CostModel:
    """Time the two models' forwards and fit a `CostModel` (module docstring).

    Args:
        target, draft: `CausalLM`s as the method decodes with them (the int8 draft, a head-subset
            view). key: ((name, value), ...) recorded in the model. layout: the target's linear
            layout (``lin=``). grid: what is timed, and how often (`CostGrid`).
    """
    cuda = str(target.device).startswith("cuda")
    with torch.inference_mode():
        drafts = time_appends(draft, grid.draft_rows, grid.lengths, grid.repeats, cuda)
        with model_layout(target, layout):
            targets = time_appends(target, grid.target_rows, grid.lengths, grid.repeats, cuda)
    samples = [("draft", *s) for s in drafts] + [("target", *s) for s in targets]
    return CostModel.fitted(samples, key)


def _fingerprint(model) -> str:
    """A model's identity for the cache key: its name, config and parameter count."""
    config = getattr(model.model, "config", None)
    text = config.to_json_string(use_diff=False) if hasattr(config, "to_json_string") else repr(config)
    count = sum(p.numel() for p in model.model.parameters())
    return hashlib.sha256(f"{model.name}|{count}|{text}".encode()).hexdigest()[:16]


def cost_key(spec: BenchMethod, pair, config) -> tuple:
    """((name, value), ...): what a method's cost model depends on, the CPU's model name included
    (torch's capability alone names an AMX Xeon and an EPYC alike)."""
    import transformers

    device = str(config.device)
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    # the engine's own forwards enter the key only where used: the models cached before them keep their keys
    forwards = tuple((name, value) for name, value in (("draft_forward", spec.draft_forward),
                                                       ("target_forward", spec.target_forward)) if value != "hf")
    return (("schema", COST_SCHEMA), ("target", pair.target.name), ("target_id", _fingerprint(pair.target)),
            ("draft", pair.draft.name), ("draft_id", _fingerprint(pair.draft)), ("device", device),
            ("device_name", name), ("dtype", str(pair.target.dtype)), ("draft_quant", spec.draft_quant),
            ("draft_vocab", spec.draft_vocab), ("linear_layout", spec.linear_layout),
            ("threads", torch.get_num_threads()), ("torch", torch.__version__),
            ("transformers", transformers.__version__), ("cpu_capability", host_info(device)["cpu_capability"]),
            ("cpu", cpu_name())) + forwards


def spot_check(target, draft, model: CostModel, *, layout: str = "xw", repeats: int = 3) -> dict:
    """Time `repeats` draft forwards of one row and target forwards of `SPOT_TARGET_ROWS` rows
    (in the linear `layout`, as `measure_costs`) at `SPOT_LENGTH` cached positions, each after a
    warm-up (`time_appends`), and set their medians against `model`'s prediction.

    Returns:
        {"draft_1_row" / "target_8_rows": {"predicted_s", "measured_s", "ratio"}, "drift"}: ratio =
        measured / predicted; drift = the largest of max(ratio, 1 / ratio) - 1 (0: as predicted).
    """
    cuda = str(target.device).startswith("cuda")
    out, drift = {}, 0.0
    with torch.inference_mode(), model_layout(target, layout):
        spots = (("draft_1_row", draft, 1), (f"target_{SPOT_TARGET_ROWS}_rows", target, SPOT_TARGET_ROWS))
        for name, who, rows in spots:
            times = sorted(s for *_, s in time_appends(who, (rows,), (SPOT_LENGTH,), repeats, cuda))
            measured = times[len(times) // 2]
            predicted = float((model.draft if who is draft else model.target).seconds(rows, SPOT_LENGTH))
            ratio = measured / predicted if predicted > 0 else float("inf")  # a model pricing 0 s is stale
            out[name] = {"predicted_s": predicted, "measured_s": measured, "ratio": ratio}
            drift = max(drift, ratio - 1, 1 / ratio - 1)
    out["drift"] = drift
    return out


class CostModels:
    """One bench run's cost models, one per lever set, loaded from the disk cache or measured
    (module docstring). `models` maps each key's id (a hash) to its `CostModel`; `refresh`
    measures again even where the cache holds a model (and replaces it); a cached model whose
    `spot_check` drifts past `tolerance` is measured again too. `checks` maps each key's id to
    its spot check, with "tolerance", "source" ("cache": kept; "measured again": drifted; "measured":
    none was cached) and "spot_check" (None where none was cached).

    Raises:
        ValueError: tolerance not > 0 (None: `DRIFT_TOLERANCE`).
    """

    def __init__(self, folder: str | None = None, repeats: int = CostGrid.repeats, refresh: bool = False,
                 tolerance: float | None = None):
        tolerance = DRIFT_TOLERANCE if tolerance is None else tolerance
        if not tolerance > 0:
            raise ValueError(f"tolerance: expected a fraction > 0, got {tolerance!r}")
        self.folder, self.repeats, self.refresh, self.tolerance = folder, repeats, refresh, tolerance
        self.models: dict[str, CostModel] = {}
        self.checks: dict[str, dict] = {}

    def _path(self, ident: str) -> str:
        folder = self.folder or os.environ.get(COST_CACHE_ENV, "").strip() or os.path.join(str(cache_dir()), "costs")
        return os.path.join(folder, f"{ident}.json")

    def for_method(self, spec: BenchMethod, pair, config) -> tuple[str, CostModel]:
        """(key id, cost model) of `spec`'s levers; `pair` is the method's (its int8 draft for dq=8)."""
        key = cost_key(spec, pair, config)
        ident = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
        if ident in self.models:
            return ident, self.models[ident]
        path, draft = self._path(ident), pair.draft
        vocab = draft_vocabulary(spec, pair)
        if vocab is not None:
            draft = draft.with_head_subset(vocab.subset(draft.vocab_size))
        check = {"tolerance": self.tolerance, "source": "measured", "spot_check": None}
        if os.path.exists(path) and not self.refresh:
            with open(path) as handle:
                cached = CostModel.from_dict(json.load(handle))
            check["spot_check"] = spot_check(pair.target, draft, cached, layout=spec.linear_layout)
            if check["spot_check"]["drift"] <= self.tolerance:
                check["source"] = "cache"
                self.models[ident], self.checks[ident] = cached, check
                return ident, cached
            check["source"] = "measured again"
        model = measure_costs(pair.target, draft, key, layout=spec.linear_layout, grid=CostGrid(repeats=self.repeats))
        write_json_atomic(path, model.to_dict())
        self.models[ident], self.checks[ident] = model, check
        return ident, model

    def attach(self, spec: BenchMethod, pair, config) -> BenchMethod:
        """`spec` with its cost model as the ``costs`` parameter when it runs policy "auto"."""
        if spec.param("policy") != "auto":
            return spec
        ident, model = self.for_method(spec, pair, config)
        return replace(spec, params=spec.params + (("costs", model),), cost_model=ident)


def recorded_spec(label: str, results: dict, draft_length: int, num_paths: int) -> BenchMethod:
    """The bench method `label` as a results file ran it: parsed (`parse_method`) and, under the
    cost policy, with the cost model its records name (the file's environment "cost_models"), so
    that a re-run takes the same decisions.

    Raises:
        ValueError: a policy-"auto" label whose records name no cost model the file holds.
    """
    spec = parse_method(label, draft_length, num_paths)
    if spec.param("policy") != "auto":
        return spec
    models = results.get("environment", {}).get("cost_models", {})
    ident = next((r.get("cost_model") for key, r in results.get("records", {}).items()
                  if key.startswith(f"{label}|") and r.get("cost_model") in models), None)
    if ident is None:
        raise ValueError(f"results: {label!r} ran the cost policy, but the file holds no cost model its records name")
    return replace(spec, params=spec.params + (("costs", CostModel.from_dict(models[ident])),), cost_model=ident)
