"""`run_bench`: run (or resume) the bench of `BenchConfig` and write its results file.

Per prompt, every method (`verispec.bench.spec`) decodes through `verispec.bench.dispatch.run_method`
inside one timed span (`verispec.bench.clocks`); each record is written as soon as it is measured
(`verispec.bench.records`), and the summary, table and plot come from `verispec.bench.report`.
The run's own state (its int8 drafts, its phrase pools) is created here and passed down.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, replace
from importlib.metadata import version

import torch

from ..empirical.drafters.phrases import PhrasePool
from ..empirical.speedups.hardware import cpu_name, host_info, resolve_dtype
from ..empirical.speedups.lean_forward import DESCRIPTION as LEAN_DESCRIPTION, SCRIPTED_DESCRIPTION, TARGET_DESCRIPTION
from ..empirical.speedups.linear_layout import DESCRIPTIONS
from ..empirical.speedups.quantize import DESCRIPTION
from .clocks import PeakMemory, PhaseClock, prefill_only_seconds
from .config import BenchSettings
from .costs import CostModels
from .dispatch import run_method
from .drafts import QuantizedDrafts
from .records import (RECORD_SCHEMA, load_results, measured_record, record_key, restore_pools, save_pool,
                      save_results)
from .report import FIELDS, plot_summary, summarize
from .spec import BASELINE, draft_vocabulary, parse_method
from .prompts import HUMANEVAL_SIZE, humaneval_prompts
from .weights import load_pair

__all__ = ["BenchConfig", "run_bench", "resolved_dtype", "default_output", "environment", "prepare", "warm_up"]


@dataclass
class BenchConfig(BenchSettings):
    """What `run_bench` measures: the fields and defaults of `config.BenchSettings` (the CLI's long
    options), with the methods a run needs (its identity, its resolved dtype)."""

    def identity(self) -> dict:
        """The fields a resumed run must share with the file it resumes (every record depends on
        them), with the record layout's version. Prompts, methods and temperatures may change:
        records are keyed by them, so a rerun with more of either only adds records. "auto" is
        resolved first (`resolve`), so a file records the dtype its records ran in. stop_at_eos
        is listed only when set (files written before it existed ran without an EOS stop), and
        graphs only when off (files written before it existed ran eagerly, as a CPU run does)."""
        out = asdict(self)
        for name in ("threads", "prompts", "first_prompt", "methods", "temperatures", "device_map"):
            out.pop(name)
        if not self.stop_at_eos:
            out.pop("stop_at_eos")
        if self.graphs:
            out.pop("graphs")
        out["record_schema"] = RECORD_SCHEMA
        return out

    def resolve(self, pair=None) -> tuple["BenchConfig", str]:
        """(this config with `dtype` "auto" replaced, the reason): `resolved_dtype`."""
        dtype, reason = resolved_dtype(self, pair)
        return replace(self, dtype=dtype), reason


def resolved_dtype(config, pair=None) -> tuple[str, str]:
    """The dtype a bench config runs in and why: "auto" is the host's choice
    (`verispec.empirical.speedups.hardware.choose_dtype`), or the given models' dtype when a loaded pair is
    passed; an explicit dtype must be the pair's.

    Raises:
        ValueError: `config.dtype` names a dtype other than the given pair's.
    """
    actual = None if pair is None else str(pair.target.dtype).removeprefix("torch.")
    dtype, reason = resolve_dtype(config.dtype, config.device)
    if config.dtype == "auto" and actual is not None:
        return actual, reason if actual == dtype else "the given models' dtype"
    if actual is not None and actual != dtype:
        raise ValueError(f"dtype: {config.dtype!r} resolves to {dtype}, but the given models are {actual}")
    return dtype, reason


def default_output(device: str) -> str:
    """benchmarks/results/bench_real_<device>.json (device "cpu" or a slug of the GPU name)."""
    tag = "cpu"
    if str(device).startswith("cuda") and torch.cuda.is_available():
        tag = torch.cuda.get_device_name(torch.device(device)).lower().replace(" ", "-")
    return os.path.join("benchmarks", "results", f"bench_real_{tag}.json")


def environment(config, threads: int, dtype_reason: str = "") -> dict:
    """What a results file records about the host and libraries it ran on (the JSON's "environment").

    "scikit_learn" is its version, or None: transformers' assisted generation adapts its confidence
    threshold (an ROC curve over past drafts) only where scikit-learn is installed, so the peer `hf`
    drafts differently on hosts with and without it."""
    import transformers
    from transformers.generation import candidate_generator

    cuda = str(config.device).startswith("cuda") and torch.cuda.is_available()
    return {"machine": platform.machine(), "cpu": cpu_name(), **host_info(config.device),
            "cores": os.cpu_count(), "torch_threads": threads, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "scikit_learn": version("scikit-learn") if candidate_generator.is_sklearn_available() else None,
            "device": config.device, "dtype": config.dtype, "dtype_reason": dtype_reason,
            "device_name": torch.cuda.get_device_name(torch.device(config.device)) if cuda else "cpu"}


def warm_up(pair, specs, config, drafts: QuantizedDrafts, prompt=None) -> None:
    """Short runs so one-time costs (kernels, allocator) are paid before timing (on throwaway
    phrase pools, so the measured pools start cold); builds the int8 drafts of ``dq=8`` methods
    (`drafts`) before any timing. With CUDA graphs on, each method also decodes `prompt` (int64
    [1, n], the run's first) with the run's max_new_tokens at every temperature of the run, so
    its steps are captured for those shapes before timing, as a serving engine captures its
    graphs at start-up (a record says how many steps it captured: none where the shapes match)."""
    tiny = torch.arange(1, 9, device=pair.target.device).unsqueeze(0) % pair.target.vocab_size
    small = BenchConfig(**{**asdict(config), "max_new_tokens": 4})
    for spec in specs:
        run_method(spec, drafts.pair_for(spec, pair), tiny, small, 1.0 if spec.name != BASELINE else 0.0, 0, {})
        if prompt is not None and config.graphs and str(config.device).startswith("cuda"):
            for T in config.temperatures:
                run_method(spec, drafts.pair_for(spec, pair), prompt, config, float(T), 0, {})


def prepare(config, pair=None, prompts=None, first: int = 0):
    """Set torch threads and return (pair, prompts): `config`'s models and `config.prompts`
    HumanEval prompts after the first `first` where not given.

    Raises:
        ValueError: `first` is not an int with first + config.prompts <= 164 (HumanEval's size).
    """
    if prompts is None and (isinstance(first, bool) or not isinstance(first, int)
                            or not 0 <= first <= HUMANEVAL_SIZE - config.prompts):  # checked before the models load
        raise ValueError(f"first_prompt: expected an int in 0..{HUMANEVAL_SIZE - config.prompts} "
                         f"({config.prompts} prompts of {HUMANEVAL_SIZE}), got {first!r}")
    if config.threads:
        torch.set_num_threads(config.threads)
    if pair is None:
        pair = load_pair(config.target, config.draft, dtype=getattr(torch, config.dtype), device=config.device,
                         device_map=config.device_map)
    if prompts is None:
        prompts = humaneval_prompts(first + config.prompts)[first:]
    return pair, prompts


def run_bench(config: BenchConfig, output: str | None = None, *, fresh: bool = False, pair=None,
              prompts=None, progress=None, plot: bool = True) -> dict:
    """Run (or resume) the benchmark and return the results dict (also written to `output`).

    Args:
        config: what to measure. output: JSON path (default `default_output(config.device)`).
        fresh: ignore an existing file. pair: a loaded `ModelPair` (default: load config's).
        prompts: list of {"task_id", "prompt"} (default: the first `config.prompts` of HumanEval).
        progress: callable(description) called before each record that is run (not for the
            records a resumed file already holds; the CLI's progress bar).
        plot: write a PNG next to the JSON (needs matplotlib; skipped with a note otherwise).

    Raises:
        ValueError: bad methods or an output file from another configuration.
    """
    specs = [parse_method(BASELINE, config.draft_length, config.num_paths)] + [
        parse_method(m, config.draft_length, config.num_paths) for m in config.methods if m != BASELINE]
    config, dtype_reason = config.resolve(pair)
    output = output or default_output(config.device)
    results = load_results(output, config, fresh)
    results.pop("prefill", None)  # no timing is shared between records (each span has its own)
    pair, prompts = prepare(config, pair, prompts, config.first_prompt)
    results["environment"] = _run_environment(config, specs, dtype_reason)
    results["fields"] = dict(FIELDS)
    results["last_run"] = {"prompts": [p["task_id"] for p in prompts], "methods": [s.label for s in specs],
                           "temperatures": [float(t) for t in config.temperatures]}
    drafts = QuantizedDrafts()  # this run's int8 drafts, built in the warm-up
    specs = _with_costs(specs, pair, config, drafts, results)
    first = pair.tokenizer(prompts[0]["prompt"], return_tensors="pt").input_ids.to(pair.target.device) if prompts else None
    warm_up(pair, specs, config, drafts, first)
    run = _Run(pair, specs, config, results, output, progress, restore_pools(results), drafts)
    try:
        for item in prompts:
            _run_prompt(item, run)
    finally:
        for model in (pair.target, pair.draft):
            model.reuse_prefills(False)
    results["summary"] = summarize(results, config)
    save_results(output, results)
    if plot:
        results["plot"] = plot_summary(results["summary"], os.path.splitext(output)[0] + ".png")
    return results


def _with_costs(specs, pair, config, drafts: QuantizedDrafts, results: dict) -> list:
    """`specs` with the measured cost model of each policy-"auto" method attached (loaded from the
    disk cache or measured now, before any timed span: `verispec.bench.costs`); every model used
    is recorded under the results' environment "cost_models" (fits and raw samples), and how each
    was obtained under "cost_checks" (from the cache after a spot check, measured, or measured
    again because the cached one had drifted)."""
    costs = CostModels()
    out = [costs.attach(spec, drafts.pair_for(spec, pair), config) for spec in specs]
    if costs.models:
        results["environment"]["cost_models"] = {ident: model.to_dict() for ident, model in costs.models.items()}
        results["environment"]["cost_checks"] = dict(costs.checks)
    return out


def _run_environment(config, specs, dtype_reason: str) -> dict:
    """`environment`, plus what ``dq=8``, each ``lin=`` layout and ``df=`` / ``tf=`` forward of the run's
    methods mean."""
    results = environment(config, torch.get_num_threads(), dtype_reason)
    if any(spec.draft_quant for spec in specs):
        results["draft_quant"] = {"dq=8": DESCRIPTION, "quantized_engine": torch.backends.quantized.engine}
    if any(spec.linear_layout != "xw" for spec in specs):
        results["linear_layout"] = {f"lin={spec.linear_layout}": DESCRIPTIONS[spec.linear_layout]
                                    for spec in specs if spec.linear_layout != "xw"}
    described = {"lean": LEAN_DESCRIPTION, "scripted": SCRIPTED_DESCRIPTION}
    used = [kind for kind in described if kind in {spec.draft_forward for spec in specs}]
    if used:
        results["draft_forward"] = {f"df={kind}": described[kind] for kind in used}
    if any(spec.target_forward != "hf" for spec in specs):
        results["target_forward"] = {"tf=lean": TARGET_DESCRIPTION}
    return results


@dataclass(frozen=True)
class _Run:
    """What every prompt of one `run_bench` call shares: the loaded pair, the parsed methods, the
    resolved config, the results dict (filled in place) and its `output` path, the progress
    callback, the phrase pools (by (label, T)) and the run's int8 drafts."""
    pair: object
    specs: list
    config: BenchConfig
    results: dict
    output: str
    progress: object
    pools: dict
    drafts: QuantizedDrafts


def _run_prompt(item, run: _Run):
    """Every record of one prompt not yet in `run.results`, each saved as soon as it is measured."""
    pair, specs, config, results, pools = run.pair, run.specs, run.config, run.results, run.pools
    task = item["task_id"]
    todo = [(s, T) for T in config.temperatures for s in specs
            if record_key(s.label, T, task) not in results["records"]]
    if not todo:
        return
    ids = pair.tokenizer(item["prompt"], return_tensors="pt").input_ids.to(pair.target.device)  # [1, n]
    if ids.shape[1] < 2:  # the split of a span needs a prefill forward before the first verification
        raise ValueError(f"prompts: {task!r} has {ids.shape[1]} token; the bench needs at least 2")
    for model in (pair.target, pair.draft):
        model.reuse_prefills(False)  # every method computes (and is timed with) its own prefill
    for spec, T in todo:
        if run.progress:
            run.progress(f"{task} {spec.label} T={float(T):g}")
        method_pair = run.drafts.pair_for(spec, pair)  # dq=8: the int8 draft (built in `warm_up`)
        models = (method_pair.target, method_pair.draft)
        with PeakMemory(config.device) as memory, PhaseClock(models, config.device) as clock:
            result = run_method(spec, method_pair, ids, config, float(T), config.seed, pools)
        record = measured_record(spec, result, memory, clock)
        _add_prompt_facts(record, spec, pair, method_pair, ids, result, config)
        results["records"][record_key(spec.label, T, task)] = record
        if isinstance(pools.get((spec.label, float(T))), PhrasePool):  # saved: a resumed run starts as warm
            save_pool(results, spec.label, T, pools[spec.label, float(T)])
        save_results(run.output, results)


def _add_prompt_facts(record, spec, pair, method_pair, ids, result, config) -> None:
    """What a record says about its prompt: its length, the draft vocabulary's size on it (|S|:
    the k lowest ids, the prompt's and the added tokens), the draft's width, and the prompt's
    prefill timed alone where the prompt's call emitted tokens."""
    record["prompt_tokens"] = int(ids.shape[1])
    if spec.draft_vocab:
        vocab = draft_vocabulary(spec, pair)
        size = int(vocab.subset(pair.draft.vocab_size, ids).numel())
        record.update(vocab.label(), draft_vocab_tokens=size)
    if spec.draft_quant:
        record["draft_quant_bits"] = spec.draft_quant
    if record["prompt_call_tokens"]:
        record["prefill_only_s"] = prefill_only_seconds(method_pair, ids, result.stats.draft_forwards > 0,
                                                        config.device)
