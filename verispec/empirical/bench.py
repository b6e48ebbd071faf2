"""`verispec bench`: speculative decoding on a real model pair, against target-only decoding and
transformers' assisted generation, in one process (docs/real_models.md, "What the bench does").

For every prompt and temperature, every runner decodes exactly `max_new_tokens` tokens from the
prompt, timed as one span (`PhaseClock`): its end-to-end time is that span, prefill included,
and the span is split where the runner has read the prompt, at the end of the first forward of
each model (forward hooks): the draft's prefill, then the first target call, which reads the
prompt together with the first draft and verifies it (ours, `engine.decode`'s default, as
transformers' assisted generation does). The decode phase, the part speculative decoding speeds
up, is the rest of the span; its tokens/s counts the tokens emitted in it. Every runner computes
its own prefill: no time or cache is carried between runners, prompts or processes.

Block efficiency is the same ratio for every runner: tokens emitted by the target calls after the
one that reads the prompt, per such call. The peer's accepted length of every call is counted from
forward hooks (`peer.call_tokens`). The JSON's "fields" names, for every summary column, whether
it is measured or derived and the formula (`FIELDS`); the table marks derived columns.

Runners (``--methods``): ``target_only`` (always run: the baseline), ``hf`` (the peer),
``hf_prompt_lookup`` (transformers' ``prompt_lookup_num_tokens=10``), every method of
`verispec.empirical.decode.METHODS` (token, block, gbv, nss, rrs, rrsw, spectr, traversal) with
optional parameters (``gbv:K=3``, ``block:L=5``), draft trees of `verispec.empirical.trees`
(``opt_tree``, ``kary``, ``eagle``, ``chain_tree``; node budget ``opt_tree:n=25``, default 50; the
predicted E[A] is reported next to the measured tau), ``ouroboros`` and ``lookahead``
(`verispec.empirical.ouroboros`; one phrase pool per runner, warm across the prompts of a run;
``K`` pool candidates per lookup, default 3, and ``W`` Jacobi window slots, default 4, 0 = none:
``ouroboros:K=1,W=0``), ``ouroboros_phrase`` (Ouroboros phrase by phrase: whole phrases from ``G``
guesses per draft forward, default 8, and the pool refined from the target's verification;
``ouroboros_phrase:L=4,K=3,G=8,W=4``) and
``prompt_lookup`` (n-gram drafts from the context, point-mass token verification), ``adaptive``
(a draft-model chain stopped at low draft confidence, its length cap scheduled from the acceptance
history; ``L`` = the initial cap, ``M`` = its ceiling, default 4 L, ``c`` = the confidence stop in
percent, default 40 as transformers, ``sched=constant`` keeps the cap at L (transformers' default
schedule), default ``sched=heuristic`` (+2 after a full acceptance, -1 otherwise), ``v=block``
verifies the chain by block verification instead of token verification, ``g=k`` lets every
draft forward check k prompt-lookup guesses of the chain's next tokens (the same chain in fewer
draft forwards where the draft repeats the context): ``adaptive:L=8,M=20,c=20,v=block``,
``adaptive:L=20,M=20,g=4``) and ``hybrid`` (the lookup phrase when the context has one, the
adaptive chain otherwise; `verispec.empirical.adaptive`), the tree walks ``khisti:K=2``,
``optimal_is:K=2`` and ``spechub`` (K = 2 only) of `verispec.empirical.rules.multistep` (the IS
rules solve a selection LP over the full vocabulary: small vocabularies only; ``khisti:K=2,s=5``
and ``optimal_is:K=2,s=5`` solve it over 5 tokens, at any vocabulary), and a user's own
reference `Method` as ``pkg.module:attr`` (its verify runs through `verispec.empirical.adapter` on
the real models' p and q; at T = 0 a lossless rule reproduces target-only greedy).
Runners with a draft-model chain or paths (``DRAFT_VOCAB_RUNNERS``: token, block, the multi-path
methods, the walks, adaptive, hybrid) take ``dv=k``, e.g. ``hybrid:dv=32768``: the draft's LM head
over a token subset only (FR-Spec, arXiv 2502.14856; `verispec.empirical.draftvocab`), the k lowest
ids with the prompt's ids and the tokenizer's added tokens; their records carry
``draft_vocab_size`` (k) and ``draft_vocab_tokens`` (|S| for that prompt).
Every runner with a draft model (``DRAFT_QUANT_RUNNERS``, the peer ``hf`` included) takes ``dq=8``,
e.g. ``hf:dq=8``, ``block:dv=32768,dq=8``: it runs with an int8-weight copy of the draft
(`verispec.empirical.quantize`, built once per process before timing; the target is untouched, so
the output law is too); records carry ``draft_quant_bits`` and the JSON's environment says what
``dq=8`` means (``draft_quant``).
Every runner, the peers included, takes ``lin=wx``, e.g. ``hf:dq=8,lin=wx``: its target's linear
layers run as ``(W @ X^T)^T`` for 2..32 rows on CPU (`verispec.empirical.linear_layout`; cheaper
than torch's ``X @ W^T`` for a verification forward's few rows on some CPUs, the same sums up to
float rounding); ``lin=wxpad`` is ``wx`` with the rows zero-padded to the next power of two (the
GEMM kernel of some CPUs is much cheaper at 16 or 32 rows than at 15 or 31); default ``lin=xw``,
torch's own. Giving it to the peer too splits a speedup into what the layout gives and what the
drafting gives.
Every runner but the HF peers decodes through the one engine (`verispec.empirical.engine`).

Results: one record per (runner, temperature, prompt) in a JSON file written atomically after each
record; a rerun with the same configuration resumes (records present are skipped), a different
configuration is refused unless ``--fresh``. The phrase runners' pools are saved with their records
(``pools``), so a resumed run continues with the pools an uninterrupted run would have. A table is
printed and a plot written next to the JSON.
"""

from __future__ import annotations

import os
import platform
import threading
import time
import weakref
from dataclasses import asdict, dataclass, replace

import torch

from ..atomic import write_json_atomic
from . import decode, methods
from .engine import decode as decode_engine
from .weights import DEFAULT_DRAFT, DEFAULT_TARGET

__all__ = ["BenchConfig", "RunnerSpec", "parse_runner", "run_bench", "summarize", "default_output"]

DEFAULT_METHODS = ("hf", "token", "block", "gbv:K=3")
#: Version of the record layout (2: one timed span per record, split by `PhaseClock`); files of
#: another version are refused on resume rather than mixed.
RECORD_SCHEMA = 2
_PARAMS = {"L": "draft_length", "K": "num_paths", "n": "node_budget", "W": "window", "G": "guess_set",
           "s": "truncation", "dv": "draft_vocab", "dq": "draft_quant", "M": "max_draft_length",
           "c": "confidence_percent", "g": "guess_length"}
#: Phrase-pool runners: K = pool candidates per lookup, W = Jacobi window slots (0: none).
PHRASE_RUNNERS = ("ouroboros", "ouroboros_phrase", "lookahead")
#: Their defaults, the decoders' own (`ouroboros_speculative`, `lookahead_speculative`).
PHRASE_DEFAULTS = {"num_paths": 3, "window": 4}
#: Tree drafters of `verispec.empirical.trees` (runner name -> tree kind), node budget `n`.
TREE_RUNNERS = {"opt_tree": "opt_tree", "kary": "kary", "eagle": "eagle", "chain_tree": "chain"}
#: The runner name of a user's reference Method given as ``pkg.module:attr`` (its label is the spec).
USER_RUNNER = "method"
#: Runners that are neither decode methods nor trees (the phrase runners among them take K and W).
OTHER_RUNNERS = ("target_only", "hf", "hf_prompt_lookup", "ouroboros", "ouroboros_phrase", "lookahead",
                 "prompt_lookup")
#: Cheaper-draft runners of `verispec.empirical.adaptive` (L = the initial length cap, M = its ceiling).
ADAPTIVE_RUNNERS = ("adaptive", "hybrid")
#: Runners whose draft model may run over a token subset (``dv=k``, FR-Spec: `draftvocab`).
DRAFT_VOCAB_RUNNERS = ADAPTIVE_RUNNERS + tuple(decode.METHODS) + tuple(methods.WALK_METHODS)
#: Runners that run the draft model, so take ``dq=8`` (int8 draft weights: `verispec.empirical.quantize`),
#: the peer ``hf`` among them (the same int8 draft as its assistant: the like-for-like comparison).
DRAFT_QUANT_RUNNERS = ("hf",) + DRAFT_VOCAB_RUNNERS + tuple(TREE_RUNNERS) + ("ouroboros", "ouroboros_phrase")


@dataclass(frozen=True)
class RunnerSpec:
    """One runner: `name` and its L (draft length), K (paths; pool candidates of phrase runners),
    n (node budget of trees), W (Jacobi window of phrase runners)."""

    label: str
    name: str
    draft_length: int = 0
    num_paths: int = 1
    node_budget: int = 0
    window: int = 0
    guess_set: int = 0  # ouroboros_phrase: pool phrases the draft model checks per draft forward
    truncation: int = 0  # khisti, optimal_is: tokens of the s-truncated selection LP (0: full vocabulary)
    draft_vocab: int = 0  # FR-Spec: the draft's head over the k lowest ids + prompt + added tokens (0: all)
    draft_quant: int = 0  # 8: the draft's Linear weights int8 (`quantize.quantize_draft`); 0: as loaded
    max_draft_length: int = 0  # adaptive, hybrid: the length cap's ceiling M >= L (0: the method's default, 4 L)
    confidence_percent: int = 40  # adaptive, hybrid: stop a chain after a token of draft confidence < c / 100
    schedule: str = "heuristic"  # adaptive, hybrid: the cap's schedule (`adaptive.SCHEDULES`; constant: stays L)
    verifier: str = "token"  # adaptive, hybrid: the chain's verifier (`adaptive.VERIFIERS`: token or block)
    guess_length: int = 0  # adaptive, hybrid: prompt-lookup guesses the draft model checks per forward (0: none)
    linear_layout: str = "xw"  # the target's GEMM layout for few rows (`linear_layout.LAYOUTS`; any runner)


def runner_names() -> tuple:
    """Every runner `verispec bench --methods` accepts."""
    return OTHER_RUNNERS + ADAPTIVE_RUNNERS + tuple(decode.METHODS) + tuple(TREE_RUNNERS) + tuple(methods.WALK_METHODS)


def _read_params(params: str, text: str, values: dict) -> set:
    """Write the ``KEY=int`` items of `params` into `values` (by `_PARAMS` name),
    ``sched=heuristic|constant``, ``v=token|block`` and ``lin=xw|wx``; the keys given.

    Raises:
        ValueError: an unknown key or a value that is not an int >= 1 (W: >= 0), or an unknown
            schedule, verifier or linear layout.
    """
    from .adaptive import SCHEDULES, VERIFIERS
    from .linear_layout import LAYOUTS

    given = set()
    for item in filter(None, params.split(",")):
        key, _, value = (part.strip() for part in item.partition("="))
        if key == "sched" and value in SCHEDULES:
            values["schedule"] = value
        elif key == "v" and value in VERIFIERS:
            values["verifier"] = value
        elif key == "lin" and value in LAYOUTS:
            values["linear_layout"] = value
        elif (key not in _PARAMS or not value.isdigit() or int(value) < (0 if key in ("W", "c") else 1)
                or (key == "c" and int(value) > 100)):
            raise ValueError(f"methods: bad parameter {item!r} in {text!r} "
                             "(use L=, K=, n=, G=, g=, s=, dv=, M= with an int >= 1, dq=8, W= with an int >= 0, "
                             f"c= in 0..100, sched= one of {', '.join(SCHEDULES)}, v= one of "
                             f"{', '.join(VERIFIERS)} or lin= one of {', '.join(LAYOUTS)})")
        else:
            values[_PARAMS[key]] = int(value)
        given.add(key)
    return given


#: Parameters only some runners take: key -> (those runners, what it is).
_SCOPED = {"dv": (DRAFT_VOCAB_RUNNERS, "dv (a draft vocabulary subset) is for"),
           "dq": (DRAFT_QUANT_RUNNERS, "dq=8 (int8 draft weights) is the only width, for runners with a draft model:"),
           "M": (ADAPTIVE_RUNNERS, "M (the length cap's ceiling, >= L) is for"),
           "c": (ADAPTIVE_RUNNERS, "c (the confidence stop, in percent) is for"),
           "sched": (ADAPTIVE_RUNNERS, "sched (the length cap's schedule) is for"),
           "v": (ADAPTIVE_RUNNERS, "v (the chain's verifier, token or block) is for"),
           "g": (ADAPTIVE_RUNNERS, "g (prompt-lookup guesses per draft forward) is for"),
           "G": (("ouroboros_phrase",), "only ouroboros_phrase takes a guess set G:"),
           "s": (("khisti", "optimal_is"), "only khisti and optimal_is take an LP truncation s:")}


def _check_scopes(name: str, given: set, values: dict, text: str) -> None:
    """Raise ValueError (naming ``methods``) for a parameter in `given` that runner `name` does not
    take, a dq other than 8, or a ceiling M below L."""
    out_of_range = {"dq": values["draft_quant"] != 8,
                    "M": values["max_draft_length"] < values["draft_length"]}
    for key in sorted(given & set(_SCOPED)):
        runners, what = _SCOPED[key]
        if name not in runners or out_of_range.get(key, False):
            raise ValueError(f"methods: {what} {', '.join(runners)}; got {text!r}")


def parse_runner(text: str, draft_length: int, num_paths: int) -> RunnerSpec:
    """``"name"`` or ``"name:L=4,K=3"`` (trees: ``"opt_tree:n=50"``; phrase runners:
    ``"ouroboros:K=1,W=0"``) -> RunnerSpec. Chain methods get K = 1; trees default to n = 50;
    ouroboros and lookahead default to K = 3 pool candidates and a W = 4 Jacobi window.

    Raises:
        ValueError: unknown runner or parameter, K > 1 for a chain method, W for a runner without
            a Jacobi window, values < 1 (W < 0), dq other than 8 or on a runner without a draft
            model (``DRAFT_QUANT_RUNNERS`` take ``dq=8``, ``hf:dq=8`` included).
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"methods: expected a runner name, got {text!r}")
    name, _, params = text.strip().partition(":")
    if name not in runner_names() and params and "=" not in params:  # a user's Method: pkg.module:attr
        from ..reference.methods import load

        load(text.strip(), "methods", draft_length=draft_length, num_paths=num_paths)  # a clear error now
        return RunnerSpec(text.strip(), USER_RUNNER)
    if name not in runner_names():
        raise ValueError(f"methods: unknown runner {name!r}; known: {', '.join(runner_names())}")
    values = {"draft_length": draft_length, "num_paths": num_paths, "node_budget": 50, "window": 0, "guess_set": 8,
              "draft_vocab": 0, "draft_quant": 0, "guess_length": 0, "max_draft_length": RunnerSpec.max_draft_length,
              "confidence_percent": RunnerSpec.confidence_percent, "schedule": RunnerSpec.schedule,
              "verifier": RunnerSpec.verifier, "linear_layout": RunnerSpec.linear_layout}
    if name in PHRASE_RUNNERS:
        values.update(PHRASE_DEFAULTS)
    given = _read_params(params, text, values)
    _check_scopes(name, given, values, text)
    layout = values["linear_layout"]
    if name in ("target_only", "hf", "hf_prompt_lookup"):
        kept = ",".join(f"{key}={value}" for key, value in (("dq", values["draft_quant"]), ("lin", layout))
                        if key in given)
        return RunnerSpec(f"{name}:{kept}" if kept else name, name, draft_quant=values["draft_quant"],
                          linear_layout=layout)
    label = name if not params else f"{name}:{params}"
    if name in PHRASE_RUNNERS:
        return RunnerSpec(label, name, values["draft_length"], values["num_paths"], 0, values["window"],
                          values["guess_set"] if name == "ouroboros_phrase" else 0, draft_quant=values["draft_quant"],
                          linear_layout=layout)
    if "W" in given:
        raise ValueError(f"methods: {name} has no Jacobi window W; got {text!r}")
    if methods.WALK_METHODS.get(name) == "hub_pair":  # SpecHub: exactly two paths
        if "K" in given and values["num_paths"] != 2:
            raise ValueError(f"methods: {name} drafts exactly K=2 paths (a hub pair); got {text!r}")
        values["num_paths"] = 2
    elif name not in methods.WALK_METHODS and decode.METHODS.get(name, "chain") == "chain":  # chains, trees: no K
        if "K" in given and values["num_paths"] != 1:
            raise ValueError(f"methods: {name} takes no K (one draft path or a tree); got {text!r}")
        values["num_paths"] = 1
    if name not in TREE_RUNNERS:
        values["node_budget"] = 0
    return RunnerSpec(label, name, values["draft_length"], values["num_paths"], values["node_budget"],
                      truncation=values["truncation"] if "s" in given else 0, draft_vocab=values["draft_vocab"],
                      draft_quant=values["draft_quant"], max_draft_length=values["max_draft_length"],
                      confidence_percent=values["confidence_percent"], schedule=values["schedule"],
                      verifier=values["verifier"], guess_length=values["guess_length"], linear_layout=layout)


@dataclass
class BenchConfig:
    """What `run_bench` measures. Field names are the CLI's long options."""

    target: str = DEFAULT_TARGET
    draft: str = DEFAULT_DRAFT
    prompts: int = 10
    max_new_tokens: int = 128
    methods: tuple = DEFAULT_METHODS
    first_prompt: int = 0  # HumanEval prompts skipped before the `prompts` run (held-out prompts)
    temperatures: tuple = (0.0, 1.0)
    draft_length: int = 4
    num_paths: int = 3
    dtype: str = "auto"
    device: str = "cpu"
    threads: int = 0
    seed: int = 0
    device_map: str | None = None

    def identity(self) -> dict:
        """The fields a resumed run must share with the file it resumes (every record depends on
        them), with the record layout's version. Prompts, methods and temperatures may change:
        records are keyed by them, so a rerun with more of either only adds records. "auto" is
        resolved first (`resolve`), so a file records the dtype its records ran in."""
        out = asdict(self)
        for name in ("threads", "prompts", "first_prompt", "methods", "temperatures", "device_map"):
            out.pop(name)
        out["record_schema"] = RECORD_SCHEMA
        return out

    def resolve(self, pair=None) -> tuple["BenchConfig", str]:
        """(this config with `dtype` "auto" replaced, the reason): `resolved_dtype`."""
        dtype, reason = resolved_dtype(self, pair)
        return replace(self, dtype=dtype), reason


def resolved_dtype(config, pair=None) -> tuple[str, str]:
    """The dtype a bench config runs in and why: "auto" is the host's choice
    (`verispec.empirical.hardware.choose_dtype`), or the given models' dtype when a loaded pair is
    passed; an explicit dtype must be the pair's.

    Raises:
        ValueError: `config.dtype` names a dtype other than the given pair's.
    """
    from .hardware import resolve_dtype

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


# ----------------------------------------------------------------------------------------------
# Measurement helpers
# ----------------------------------------------------------------------------------------------

class PeakMemory:
    """Peak memory over a block: CUDA allocator peak, or the process RSS sampled every 5 ms on
    CPU (Linux /proc; None elsewhere). `peak_mb` after exit."""

    def __init__(self, device: str):
        self.cuda = str(device).startswith("cuda")
        self.peak_mb = None
        self._stop = threading.Event()

    @staticmethod
    def _rss_mb():
        try:
            with open("/proc/self/statm") as handle:
                return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
        except (OSError, ValueError, IndexError):
            return None

    def _sample(self):
        while not self._stop.wait(0.005):
            rss = self._rss_mb()
            if rss is not None:
                self.peak_mb = max(self.peak_mb or 0.0, rss)

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            self.peak_mb = self._rss_mb()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.peak_mb = torch.cuda.max_memory_allocated() / 2 ** 20
        else:
            self._stop.set()
            self._thread.join()
        return False


class PhaseClock:
    """One timed span of a runner, split where it has read the prompt.

    Forward hooks on the models note when the first forward of each model ends; the split is the
    latest of those (our runners: the target's then the draft's prefill; transformers' assisted
    generation: its first target call, which reads the prompt with the first candidates).
    `prefill_s` + `decode_s` = `total_s`, all measured (perf_counter; CUDA synchronised at the
    start, at the first forwards and at the end).
    """

    def __init__(self, models, device="cpu"):
        self.models = [m for m in models if m is not None]
        self.cuda = str(device).startswith("cuda")
        self.first_end: dict = {}

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def _hook(self, index):
        def hook(module, args, output):
            if index not in self.first_end:
                self.first_end[index] = self._now()
        return hook

    def __enter__(self):
        self._handles = [m.model.register_forward_hook(self._hook(i)) for i, m in enumerate(self.models)]
        self.start = self._now()
        return self

    def __exit__(self, *exc):
        self.end = self._now()
        for handle in self._handles:
            handle.remove()
        return False

    @property
    def total_s(self) -> float:
        return self.end - self.start

    @property
    def prefill_s(self) -> float:
        return (max(self.first_end.values()) - self.start) if self.first_end else 0.0

    @property
    def decode_s(self) -> float:
        return self.total_s - self.prefill_s


def _environment(config: BenchConfig, threads: int, dtype_reason: str = "") -> dict:
    import transformers

    from .hardware import host_info

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    cuda = str(config.device).startswith("cuda") and torch.cuda.is_available()
    return {"machine": platform.machine(), "cpu": cpu, **host_info(config.device),
            "cores": os.cpu_count(), "torch_threads": threads, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "device": config.device, "dtype": config.dtype, "dtype_reason": dtype_reason,
            "device_name": torch.cuda.get_device_name(torch.device(config.device)) if cuda else "cpu"}


# ----------------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------------

def _decode(spec: RunnerSpec, pair, prompt, config: BenchConfig, T: float, seed: int, pools: dict):
    """Run one runner on prompt [1, n], its target's linear layers in the runner's layout (``lin=``,
    `linear_layout`). `pools` keeps phrase pools warm across prompts."""
    from .linear_layout import linear_layout

    with linear_layout(pair.target.model, spec.linear_layout):  # "xw": changes nothing
        return _decode_runner(spec, pair, prompt, config, T, seed, pools)


def _decode_runner(spec: RunnerSpec, pair, prompt, config: BenchConfig, T: float, seed: int, pools: dict):
    """`_decode` in the layout already set."""
    N = config.max_new_tokens
    if spec.name == "target_only":
        return decode.target_only(pair.target, prompt, N, T, uniforms=seed)
    if spec.name in ("hf", "hf_prompt_lookup"):
        from .peer import hf_assisted

        if spec.name == "hf":
            return hf_assisted(pair.target, pair.draft, prompt, N, T, seed=seed)
        return hf_assisted(pair.target, None, prompt, N, T, seed=seed, prompt_lookup_num_tokens=10)
    if spec.name in TREE_RUNNERS:
        from .trees import tree_speculative

        return tree_speculative(pair.target, pair.draft, prompt, N, tree=TREE_RUNNERS[spec.name],
                                node_budget=spec.node_budget, temperature=T, uniforms=seed, storage="sequence")
    if spec.name in PHRASE_RUNNERS:
        from .ouroboros import PhrasePool, lookahead_speculative, ouroboros_phrase_speculative, ouroboros_speculative

        pool = pools.setdefault((spec.label, T), PhrasePool())
        if spec.name == "ouroboros_phrase":
            return ouroboros_phrase_speculative(pair.target, pair.draft, prompt, N, pool=pool,
                                                draft_length=spec.draft_length, num_candidates=spec.num_paths,
                                                guess_set=spec.guess_set, window=spec.window, temperature=T,
                                                uniforms=seed)
        if spec.name == "lookahead":
            return lookahead_speculative(pair.target, prompt, N, pool=pool, num_candidates=spec.num_paths,
                                         window=spec.window, temperature=T, uniforms=seed)
        return ouroboros_speculative(pair.target, pair.draft, prompt, N, pool=pool, draft_length=spec.draft_length,
                                     num_candidates=spec.num_paths, window=spec.window, temperature=T,
                                     uniforms=seed)
    if spec.name == USER_RUNNER:  # the user's reference Method through the adapter
        from ..reference.methods import load

        method = load(spec.label, "methods", draft_length=config.draft_length, num_paths=config.num_paths)
        return decode_engine(pair.target, pair.draft, prompt, method, N, T, uniforms=seed, storage="sequence")
    if spec.name == "prompt_lookup":
        method = methods.get("prompt_lookup", draft_length=spec.draft_length, max_ngram=3)
        return decode_engine(pair.target, None, prompt, method, N, T, uniforms=seed, storage="sequence")
    vocab = _draft_vocab(spec, pair)
    if spec.name in ADAPTIVE_RUNNERS:
        method = methods.get(spec.name, draft_length=spec.draft_length, draft_vocab=vocab,
                             max_draft_length=spec.max_draft_length or None,
                             threshold=spec.confidence_percent / 100, schedule=spec.schedule,
                             verifier=spec.verifier, guess_length=spec.guess_length)
        return decode_engine(pair.target, pair.draft, prompt, method, N, T, uniforms=seed, storage="sequence")
    if spec.name in methods.WALK_METHODS:
        method = methods.get(spec.name, draft_length=spec.draft_length, num_paths=spec.num_paths, draft_vocab=vocab,
                             **({"truncation": spec.truncation} if spec.truncation else {}))
        return decode_engine(pair.target, pair.draft, prompt, method, N, T, uniforms=seed, storage="sequence")
    if vocab is not None:
        method = methods.get(spec.name, draft_length=spec.draft_length, num_paths=spec.num_paths, draft_vocab=vocab)
        return decode_engine(pair.target, pair.draft, prompt, method, N, T, uniforms=seed, storage="sequence")
    return decode.speculative(pair.target, pair.draft, prompt, N, spec.name, draft_length=spec.draft_length,
                              num_paths=spec.num_paths, temperature=T, uniforms=seed, storage="sequence")


def _draft_vocab(spec: RunnerSpec, pair):
    """The runner's draft vocabulary (`draftvocab.DraftVocab`) or None: the spec's k lowest ids,
    the prompt's ids and the tokenizer's added tokens (specials such as <|endoftext|>, which the
    target emits and the draft should be able to propose)."""
    if not spec.draft_vocab:
        return None
    from .draftvocab import DraftVocab

    added = getattr(getattr(pair, "tokenizer", None), "added_tokens_decoder", None) or {}
    return DraftVocab(size=spec.draft_vocab, ids=tuple(t for t in sorted(added) if t < pair.draft.vocab_size))


#: The int8 copy of each draft model (`quantize.quantize_draft`), built once per process.
_QUANTIZED_DRAFTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _runner_pair(spec: RunnerSpec, pair):
    """The pair a runner decodes with: `pair` itself, or with ``dq=8`` a `ModelPair` whose draft
    is the int8 copy of `pair.draft` (built on first use, seconds on a 0.5B: `_warm_up` builds it,
    so it is never built inside a timed span)."""
    if not spec.draft_quant:
        return pair
    from .quantize import quantize_draft
    from .weights import ModelPair

    if pair.draft not in _QUANTIZED_DRAFTS:
        _QUANTIZED_DRAFTS[pair.draft] = quantize_draft(pair.draft, bits=spec.draft_quant)
    return ModelPair(pair.target, _QUANTIZED_DRAFTS[pair.draft], getattr(pair, "tokenizer", None))


def _record(spec, result, memory, clock: PhaseClock) -> dict:
    """One runner's measurements on one prompt. Verifying calls: the target calls after the one
    that reads the prompt. That call emits tokens (the peer's first call; our first iteration,
    `engine.decode(verify_in_prefill=True)`), which then fall in the prefill phase; a separate
    prefill forward emits none."""
    stats = result.stats
    tokens = result.tokens[0].tolist()
    taus = stats.accepted_lengths.long()  # one per target call after a prefill (the peer: one per call)
    first = 0
    if spec.name.startswith("hf"):
        first, taus = int(stats.logs["call_tokens"][0]), taus[1:]
    elif int(stats.prompt_call_tokens.sum()):  # our first iteration read the prompt
        first, taus = int(stats.prompt_call_tokens[0]), taus[1:]
    record = {"tokens": tokens, "new_tokens": len(tokens), "wall_s": clock.total_s, "prefill_s": clock.prefill_s,
              "decode_s": clock.decode_s, "decode_tokens": len(tokens) - first, "prompt_call_tokens": first,
              "target_forwards": stats.target_forwards, "draft_forwards": stats.draft_forwards,
              "verify_calls": stats.target_forwards - 1, "verify_tokens": len(tokens) - first,
              "iterations": stats.iterations, "accepted_sum": float(taus.double().sum()),
              "accepted_count": int(taus.numel()), "peak_memory_mb": memory.peak_mb}
    if spec.linear_layout != "xw":
        record["linear_layout"] = spec.linear_layout
    if spec.name.startswith("hf"):
        record["call_tokens"] = list(stats.logs["call_tokens"])
    if stats.top2_margins is not None:
        record["top2_margins"] = [round(float(m), 5) for m in stats.top2_margins[0]]
        record["runner_up_tokens"] = stats.runner_up_tokens[0].tolist()
    if hasattr(stats, "predicted_acceptance"):  # trees: the draft's own E[A] per iteration
        record["predicted_sum"] = float(stats.predicted_acceptance.double().sum())
        record["draft_rows"] = int(stats.draft_rows)
    for name in ("pool_lookups", "pool_hits"):
        if hasattr(stats, name):
            record[name] = int(getattr(stats, name))
    if spec.name in ("ouroboros", "ouroboros_phrase"):  # phrase drafts: rows per draft forward vary
        record["draft_rows"] = int(stats.draft_rows)
    return record


def _prefill_only(pair, ids, with_draft: bool, device) -> float:
    """Seconds of a prefill-only forward of the prompt `ids` [1, n] by the target (and the
    draft), fresh caches: the prefill cost of a runner whose prompt-reading call also verified a
    draft (the peer; ours), for the derived `tokens_per_s_all` of its record."""
    cuda = str(device).startswith("cuda")
    with torch.inference_mode():
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for model in (pair.target, pair.draft) if with_draft else (pair.target,):
            model.model(input_ids=ids, use_cache=True)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start


def _all_tokens_rate(records, common):
    """new tokens / seconds after the prompt's prefill, all tokens counted: wall_s - prefill_only_s
    where the prompt's call emitted tokens, else the measured decode phase (a prefill emits none)."""
    seconds = sum(r["wall_s"] - r["prefill_only_s"] if "prefill_only_s" in r else r["decode_s"]
                  for r in (records[t] for t in common))
    return sum(records[t]["new_tokens"] for t in common) / seconds if seconds > 0 else None


def _warm_up(pair, runners, config):
    """Short runs so one-time costs (kernels, allocator) are paid before timing (on throwaway
    phrase pools, so the measured pools start cold)."""
    prompt = torch.arange(1, 9).unsqueeze(0) % pair.target.vocab_size
    small = BenchConfig(**{**asdict(config), "max_new_tokens": 4})
    for spec in runners:  # builds the int8 drafts of dq=8 runners (`_runner_pair`) before any timing
        _decode(spec, _runner_pair(spec, pair), prompt, small, 1.0 if spec.name != "target_only" else 0.0, 0, {})


def load_results(path, config, fresh) -> dict:
    """The results file at `path` to resume ({"config", "records", ...}), or a fresh one.

    Raises:
        ValueError: the file holds a run whose `config.identity()` differs (unless `fresh`).
    """
    import json

    if fresh or not os.path.exists(path):
        return {"config": config.identity(), "records": {}}
    with open(path) as handle:
        results = json.load(handle)
    if results.get("config") != config.identity():
        raise ValueError(f"output: {path} holds a run with another configuration; pass --fresh to "
                         "overwrite it or --output for a new file")
    return results


def prepare(config, pair=None, prompts=None, first: int = 0):
    """Set torch threads and return (pair, prompts): `config`'s models and `config.prompts`
    HumanEval prompts after the first `first` where not given.

    Raises:
        ValueError: `first` is not an int with first + config.prompts <= 164 (HumanEval's size).
    """
    from .prompts import HUMANEVAL_SIZE, humaneval_prompts

    if prompts is None and (isinstance(first, bool) or not isinstance(first, int)
                            or not 0 <= first <= HUMANEVAL_SIZE - config.prompts):  # checked before the models load
        raise ValueError(f"first_prompt: expected an int in 0..{HUMANEVAL_SIZE - config.prompts} "
                         f"({config.prompts} prompts of {HUMANEVAL_SIZE}), got {first!r}")
    if config.threads:
        torch.set_num_threads(config.threads)
    if pair is None:
        from .weights import load_pair

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
        progress: callable(description) called before each record (the CLI's progress bar).
        plot: write a PNG next to the JSON (needs matplotlib; skipped with a note otherwise).

    Raises:
        ValueError: bad methods or an output file from another configuration.
    """
    runners = [parse_runner("target_only", config.draft_length, config.num_paths)] + [
        parse_runner(m, config.draft_length, config.num_paths) for m in config.methods if m != "target_only"]
    config, dtype_reason = config.resolve(pair)
    output = output or default_output(config.device)
    results = load_results(output, config, fresh)
    results.pop("prefill", None)  # no timing is shared between records (each span has its own)
    pair, prompts = prepare(config, pair, prompts, config.first_prompt)
    results["environment"] = _environment(config, torch.get_num_threads(), dtype_reason)
    if any(spec.draft_quant for spec in runners):
        from .quantize import DESCRIPTION

        results["environment"]["draft_quant"] = {"dq=8": DESCRIPTION,
                                                 "quantized_engine": torch.backends.quantized.engine}
    if any(spec.linear_layout != "xw" for spec in runners):
        from .linear_layout import DESCRIPTIONS

        results["environment"]["linear_layout"] = {f"lin={spec.linear_layout}": DESCRIPTIONS[spec.linear_layout]
                                                   for spec in runners if spec.linear_layout != "xw"}
    results["fields"] = dict(FIELDS)
    results["last_run"] = {"prompts": [p["task_id"] for p in prompts], "methods": [r.label for r in runners],
                           "temperatures": [float(t) for t in config.temperatures]}
    _warm_up(pair, runners, config)
    pools = _restore_pools(results)
    try:
        for item in prompts:
            _run_prompt(item, pair, runners, config, results, output, progress, pools)
    finally:
        for model in (pair.target, pair.draft):
            model.reuse_prefills(False)
    results["summary"] = summarize(results, config)
    write_json_atomic(output, results)
    if plot:
        results["plot"] = plot_summary(results["summary"], os.path.splitext(output)[0] + ".png")
    return results


def _runner_key(label: str, T) -> str:
    """The key "label|T=.." of a runner's pool, also the prefix of its records' keys."""
    return f"{label}|T={float(T):g}"


def _run_prompt(item, pair, runners, config, results, output, progress, pools):
    task = item["task_id"]
    todo = [(s, T) for T in config.temperatures for s in runners
            if f"{_runner_key(s.label, T)}|{task}" not in results["records"]]
    if not todo:
        return
    ids = pair.tokenizer(item["prompt"], return_tensors="pt").input_ids.to(pair.target.device)  # [1, n]
    if ids.shape[1] < 2:  # the split of a span needs a prefill forward before the first verification
        raise ValueError(f"prompts: {task!r} has {ids.shape[1]} token; the bench needs at least 2")
    for model in (pair.target, pair.draft):
        model.reuse_prefills(False)  # every runner computes (and is timed with) its own prefill
    for spec, T in todo:
        if progress:
            progress(f"{task} {spec.label} T={float(T):g}")
        runner_pair = _runner_pair(spec, pair)  # dq=8: the int8 draft (built in `_warm_up`)
        models = (runner_pair.target, runner_pair.draft)
        with PeakMemory(config.device) as memory, PhaseClock(models, config.device) as clock:
            result = _decode(spec, runner_pair, ids, config, float(T), config.seed, pools)
        key = f"{_runner_key(spec.label, T)}|{task}"
        results["records"][key] = _record(spec, result, memory, clock)
        results["records"][key]["prompt_tokens"] = int(ids.shape[1])
        if spec.draft_vocab:  # |S|: the k lowest ids, the prompt's and the added tokens
            vocab = _draft_vocab(spec, pair)
            size = int(vocab.subset(pair.draft.vocab_size, ids).numel())
            results["records"][key].update(vocab.label(), draft_vocab_tokens=size)
        if spec.draft_quant:
            results["records"][key]["draft_quant_bits"] = spec.draft_quant
        if results["records"][key]["prompt_call_tokens"]:  # its prompt's call emitted tokens: time its prefill alone
            results["records"][key]["prefill_only_s"] = _prefill_only(runner_pair, ids, result.stats.draft_forwards > 0,
                                                                      config.device)
        if (spec.label, float(T)) in pools:  # saved with the record: a resumed run starts as warm
            results.setdefault("pools", {})[_runner_key(spec.label, T)] = pools[spec.label, float(T)].state()
        write_json_atomic(output, results)


def _restore_pools(results) -> dict:
    """{(label, T): PhrasePool} of the phrase runners' pools saved in `results` (each the pool
    after that runner's last record), so that a resumed run continues with warm pools."""
    from .ouroboros import PhrasePool

    out = {}
    for key, state in results.get("pools", {}).items():
        label, _, T = key.rpartition("|T=")
        out[label, float(T)] = PhrasePool.from_state(state)
    return out


# ----------------------------------------------------------------------------------------------
# Summary, table, plot
# ----------------------------------------------------------------------------------------------

def _first_divergence(tokens, reference):
    return next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b), None)


def summarize(results: dict, config: BenchConfig) -> list[dict]:
    """One row per (runner, temperature) among all records of the file (runs that resumed it
    with other methods or temperatures included), over the prompts done by both the runner and
    target-only: block efficiency (tokens per target call), mean accepted length tau, decode
    tokens/s, speedup vs target-only (decode phase, same run), end-to-end speedup (prefill
    included), forwards per prompt, peak memory, and at T = 0 the greedy match rate vs
    target-only with each first divergence explained."""
    records, rows = results["records"], []
    labels = list(dict.fromkeys(k.split("|", 1)[0] for k in records))
    labels = ["target_only"] + [label for label in labels if label != "target_only"]
    runners = [parse_runner(label, config.draft_length, config.num_paths) for label in labels]
    temperatures = sorted({float(k.split("|")[1][2:]) for k in records})
    for T in temperatures:
        key = f"T={float(T):g}"
        base = {t: r for k, r in records.items() if k.startswith(f"target_only|{key}|")
                for t in [k.split("|", 2)[2]]}
        for spec in runners:
            done = {k.split("|", 2)[2]: r for k, r in records.items() if k.startswith(f"{spec.label}|{key}|")}
            common = [t for t in done if t in base]
            if not common:
                continue
            rows.append(_summary_row(spec, float(T), done, base, common))
    return rows


def _rates(records, common):
    """(decode-phase tokens/s, end-to-end tokens/s) over the prompts `common`; the first is None
    when no token was emitted after the prompt-reading call (the peer can emit every token in its
    first call when max_new_tokens is small)."""
    decode_tokens = sum(records[t]["decode_tokens"] for t in common)
    return (decode_tokens / sum(records[t]["decode_s"] for t in common) if decode_tokens else None,
            sum(records[t]["new_tokens"] for t in common) / sum(records[t]["wall_s"] for t in common))


def _ratio(a, b):
    return a / b if a is not None and b else None


def _summary_row(spec, T, done, base, common):
    tokens = sum(done[t]["new_tokens"] for t in common)
    (rate, rate_e2e), (base_rate, base_e2e) = _rates(done, common), _rates(base, common)
    iterations = sum(done[t]["accepted_count"] for t in common)
    calls = sum(done[t]["verify_calls"] for t in common)
    row = {"runner": spec.label, "temperature": T, "prompts": len(common), "tokens": tokens,
           "block_efficiency": _ratio(sum(done[t]["verify_tokens"] for t in common), calls),
           "mean_accepted": _ratio(sum(done[t]["accepted_sum"] for t in common), iterations),
           "tokens_per_s": rate, "tokens_per_s_end_to_end": rate_e2e,
           "speedup": _ratio(rate, base_rate), "speedup_end_to_end": rate_e2e / base_e2e,
           "tokens_per_s_all": _all_tokens_rate(done, common),
           "speedup_all": _ratio(_all_tokens_rate(done, common), _all_tokens_rate(base, common)),
           "prefill_s": sum(done[t]["prefill_s"] for t in common) / len(common),
           "target_forwards": sum(done[t]["target_forwards"] for t in common) / len(common),
           "draft_forwards": sum(done[t]["draft_forwards"] for t in common) / len(common),
           "peak_memory_mb": max((done[t]["peak_memory_mb"] or 0.0) for t in common)}
    if any("predicted_sum" in done[t] for t in common):
        row["predicted_accepted"] = sum(done[t].get("predicted_sum", 0.0) for t in common) / max(iterations, 1)
        row["node_budget"] = spec.node_budget
    if all("draft_rows" in done[t] for t in common):
        row["draft_rows"] = sum(done[t]["draft_rows"] for t in common) / len(common)
    if any("pool_hits" in done[t] for t in common):
        row["pool_hit_rate"] = (sum(done[t]["pool_hits"] for t in common)
                                / max(sum(done[t]["pool_lookups"] for t in common), 1))
    if T == 0 and spec.name != "target_only":
        row.update(_greedy_match(done, base, common))
    return row


#: Logit margin (top-1 minus top-2 of target-only's 1-row forward) at or below which a greedy
#: divergence counts as a near-tie: bf16 has 8 significant bits, so logits of magnitude 16-32 are
#: spaced 0.125 apart and a 1-row and a multi-row forward (other GEMM summation orders) can
#: swap two tokens within 2 such steps.
NEAR_TIE = 0.25


def _greedy_match(done, base, common):
    """Greedy match rate vs target-only; each first divergence with the target-only 1-row
    forward's top-1/top-2 logit margin there and whether the method chose the runner-up."""
    divergences = []
    for t in common:
        i = _first_divergence(done[t]["tokens"], base[t]["tokens"])
        if i is None:
            continue
        margins, runner_up = base[t].get("top2_margins"), base[t].get("runner_up_tokens")
        divergences.append({"task_id": t, "index": i, "token": done[t]["tokens"][i],
                            "target_only_token": base[t]["tokens"][i],
                            "top2_margin": margins[i] if margins else None,
                            "near_tie": bool(margins and margins[i] <= NEAR_TIE),
                            "chose_runner_up": bool(runner_up and runner_up[i] == done[t]["tokens"][i])})
    matched = [min((_first_divergence(done[t]["tokens"], base[t]["tokens"]) or len(base[t]["tokens"])),
                   len(base[t]["tokens"])) / len(base[t]["tokens"]) for t in common]
    return {"greedy_match_rate": 1 - len(divergences) / len(common),
            "greedy_matched_fraction": sum(matched) / len(matched), "divergences": divergences}


COLUMNS = (("runner", "runner", "{}"), ("T", "temperature", "{:g}"), ("prompts", "prompts", "{}"),
           ("block eff.", "block_efficiency", "{:.2f}"), ("tau", "mean_accepted", "{:.2f}"),
           ("E[A] pred.", "predicted_accepted", "{:.2f}"),
           ("tok/s", "tokens_per_s", "{:.2f}"), ("speedup*", "speedup", "{:.2f}x"),
           ("all N*", "speedup_all", "{:.2f}x"),
           ("e2e*", "speedup_end_to_end", "{:.2f}x"), ("target fw", "target_forwards", "{:.1f}"),
           ("draft fw", "draft_forwards", "{:.1f}"), ("peak MB", "peak_memory_mb", "{:.0f}"),
           ("greedy match", "greedy_match_rate", "{:.0%}"))

#: Every summary column: measured in the run, or derived (with its formula), or predicted by a
#: model. Written into the JSON ("fields") and, for the derived ones, under the table.
FIELDS = {
    "tokens": "measured: tokens generated over the prompts (max_new_tokens each)",
    "prefill_s": "measured: seconds from the runner's start to the end of the first forward of each model "
                 "(the forwards that read the prompt), mean per prompt",
    "tokens_per_s": "measured: tokens emitted in the decode phase / its seconds (the span after prefill_s; "
                    "the first target call, which reads the prompt and verifies the first draft, and the tokens "
                    "it emits fall in prefill_s; null when no "
                    "token is left for the decode phase)",
    "tokens_per_s_end_to_end": "measured: tokens / seconds of the whole span, prefill included",
    "speedup": "derived: tokens_per_s / target_only tokens_per_s (same run, same prompts)",
    "speedup_end_to_end": "derived: tokens_per_s_end_to_end / target_only tokens_per_s_end_to_end",
    "tokens_per_s_all": "derived: tokens / seconds after the prompt's prefill, every token counted: "
                        "wall_s - prefill_only_s, prefill_only_s = a prefill-only forward of the prompt by the "
                        "runner's target (and draft) timed after its run; the measured decode phase for a "
                        "runner with a separate prefill forward (it emits no token)",
    "speedup_all": "derived: tokens_per_s_all / target_only tokens_per_s_all (tokens_per_s_all: all tokens over "
                   "the seconds after the prefill, timed by a separate prefill-only forward)",
    "block_efficiency": "measured: tokens emitted by the target calls after the one that reads the prompt, "
                        "per such call (the same ratio for every runner)",
    "mean_accepted": "measured: mean accepted draft tokens tau per verifying target call (the peer's from "
                     "forward hooks)",
    "predicted_accepted": "predicted: the draft's own E[A] of its trees, per verifying call",
    "target_forwards": "measured: target forwards per prompt, prefill included",
    "draft_forwards": "measured: draft forwards per prompt, prefill included",
    "draft_rows": "measured: draft token rows fed while drafting, per prompt",
    "peak_memory_mb": "measured: peak CUDA allocation or process RSS (sampled every 5 ms)",
    "pool_hit_rate": "measured: pool lookups that found a phrase / lookups",
    "greedy_match_rate": "measured: prompts whose T=0 tokens equal target_only's",
    "greedy_matched_fraction": "measured: mean fraction of tokens before the first divergence",
}


#: Runners that simplify their papers' methods, named as such in tables and plots (docs/algorithms.md):
#: lookahead decoding with one Jacobi window level; Ouroboros with one Jacobi level in the draft
#: forward; a static EAGLE-style tree from fixed rank priors.
SIMPLIFIED = {"lookahead": "simplified: 1 window level", "ouroboros": "simplified: 1 Jacobi level",
              "eagle": "EAGLE-style, fixed priors"}


def display_name(label: str) -> str:
    """A runner label as tables and plots show it: a simplified runner says so."""
    note = SIMPLIFIED.get(label.partition(":")[0])
    return label if note is None else f"{label} ({note})"


def table(columns, summary: list[dict], title: str, caption: str | None = None):
    """A `rich.table.Table` of summary rows; columns: (header, key, format) triples, "-" where a
    row lacks the key; an optional caption under it."""
    from rich.table import Table

    out = Table(title=title, caption=caption)
    for header, _, _ in columns:
        out.add_column(header, justify="left" if header == "runner" else "right")
    for row in summary:
        cells = [fmt.format(row[key]) if row.get(key) is not None else "-" for _, key, fmt in columns]
        out.add_row(*[display_name(c) if key == "runner" else c for c, (_, key, _) in zip(cells, columns)])
    return out


def format_table(summary: list[dict], title: str = "verispec bench"):
    """A `rich.table.Table` of the summary rows; derived columns are starred, with their formulas
    in the caption."""
    derived = [f"{header} {FIELDS[key][len('derived: '):]}" for header, key, _ in COLUMNS
               if FIELDS.get(key, "").startswith("derived")]
    return table(COLUMNS, summary, title, caption="derived: " + "; ".join(derived))


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is missing (plots are skipped)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(fig, path: str) -> str:
    """Write `fig` as a PNG at `path` (folders created), close it, return the path."""
    import matplotlib.pyplot as plt

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def tree_budget_curves(summary: list[dict]) -> dict:
    """{(tree runner, T): [(node budget n, block efficiency, predicted E[A] + 1, prompts), ...]}
    sorted by n, for every tree runner (one point when it was measured at one budget)."""
    curves: dict = {}
    for row in summary:
        if "node_budget" in row:
            curves.setdefault((row["runner"].partition(":")[0], row["temperature"]), []).append(
                (row["node_budget"], row["block_efficiency"], row["predicted_accepted"] + 1.0, row["prompts"]))
    return {key: sorted(points) for key, points in curves.items()}


def plot_summary(summary: list[dict], path: str) -> str | None:
    """Bar charts of speedup and block efficiency per runner and temperature, plus (when a tree
    runner ran) block efficiency vs node budget, measured (solid) and predicted by the draft
    (dashed: E[A] + 1) -> PNG path, or None when matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return None
    temperatures = sorted({row["temperature"] for row in summary})
    runners = list(dict.fromkeys(row["runner"] for row in summary))
    curves = tree_budget_curves(summary)
    fig, axes = plt.subplots(1, 3 if curves else 2, figsize=(17 if curves else 11, 4))
    width = 0.8 / max(len(temperatures), 1)
    for j, T in enumerate(temperatures):
        by = {row["runner"]: row for row in summary if row["temperature"] == T}
        xs = [i + j * width for i in range(len(runners))]
        for ax, key in zip(axes, ("speedup", "block_efficiency")):
            ax.bar(xs, [(by[r].get(key) or 0) if r in by else 0 for r in runners], width, label=f"T={T:g}")
    for ax, label in zip(axes, ("decode speedup vs target-only", "tokens per target call")):
        ax.set_xticks([i + width * (len(temperatures) - 1) / 2 for i in range(len(runners))])
        ax.set_xticklabels([display_name(r) for r in runners], rotation=30, ha="right")
        ax.set_title(label)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.legend()
    if curves:
        ax = axes[2]
        for (name, T), points in sorted(curves.items()):
            line, = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                            label=f"{display_name(name)} T={T:g}")
            ax.plot([p[0] for p in points], [p[2] for p in points], linestyle="--", color=line.get_color())
        ax.set_xscale("log")
        ax.set_xlabel("node budget n")
        ax.set_title("trees: block efficiency vs n (dashed: draft's E[A] + 1)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)
