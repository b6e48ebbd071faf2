"""Watch a rule's symbolic run: which vocabulary-wide computations does it perform?

`prove(..., watch=Watch())` runs the method's iteration through `Watch.method`: the rule gets views
of the models (probability vectors that report reads of V), a view of `rand` (drawn token ids come
back as opaque `Token`s that report being ordered, compared with a constant or used in arithmetic),
and every operation on a symbolic value is shown to the watch (`verispec.formal.symbolic.observing`)
together with the *audited primitives* open on the call stack (`sys.setprofile`). What is audited
is declared where it is defined (`verispec.reference.audit`): the primitives (residual,
positive_mass, accept_probability, the i.i.d. draft draw `drafters.draw_counts`, the draws of `rand`
itself) carry `audit.primitive(kind)`, and verispec's plumbing, which may read V and handle token
ids as numbers, carries `audit.plumbing` (the prover's own package and numpy are plumbing too).
Each finding names the operation and where the rule made it. Two verdicts come out (the criterion
and its proof: docs/prove.md, "For every V"):

- `Watch.equivariant`: nothing the rule did tells one token from another, so its law commutes with
  relabeling tokens (one SMT query per orbit of outputs, `verispec.formal.symmetry`);
- `Watch.cutoff_reasons`: what keeps the cutoff theorem from applying (empty: it applies).
"""

from __future__ import annotations

import enum
import os
import sys
from contextvars import ContextVar

import numpy as np

from ..reference.audit import PLUMBING, Primitive, mark_of
from ..reference.models import LanguageModel
from .symbolic import Operation, Sym, observing, reads_of

__all__ = ["Watch", "Token", "Finding", "FindingKind"]

#: The prover's own package: its frames are instruments, never the rule (and may read V).
_PROVER = __name__.rpartition(".")[0]


class FindingKind(enum.Enum):
    """What a `Finding` is about (one finding of each kind is kept)."""

    TWO_TOKEN_COMPARISON = "comparison of two tokens"
    FIXED_POINT = "fixed point"
    TOKEN_NOT_DRAWN = "token not drawn"
    VOCABULARY_SUM = "vocabulary-wide sum"
    VOCABULARY_SIZE = "V itself"
    TOKEN_ID = "token id"
    MULTI_STEP = "multi-step"
    DRAW = "draw"
    DRAFTED_ARITHMETIC = "drafted arithmetic"
    ACCEPTANCE = "acceptance"
    RESIDUAL = "residual"


class Finding:
    """One thing the rule did that the criterion does not cover.

    kind: a `FindingKind`; breaks_symmetry: True when it also voids the relabeling symmetry;
    where: "file.py:function" of the rule code."""

    def __init__(self, kind, message, where, breaks_symmetry):
        self.kind, self.message, self.where, self.breaks_symmetry = kind, message, where, breaks_symmetry

    def __str__(self):
        return f"{self.message} (at {self.where})"


def _module_name(frame) -> str:
    return frame.f_globals.get("__name__") or ""


def _is_numpy(frame) -> bool:
    return _module_name(frame).partition(".")[0] == "numpy"


def _is_prover(frame) -> bool:
    name = _module_name(frame)
    return name == _PROVER or name.startswith(_PROVER + ".")


def _is_forwarding(frame) -> bool:
    """A deprecated keyword's wrapper (`verispec.reference.deprecation`): it only passes the call on."""
    return _module_name(frame) == "verispec.reference.deprecation"


def _where(frame) -> str:
    """"file.py:function" of `frame` or, when it is the prover's, numpy's or a deprecation wrapper's,
    of the first frame above it that is none of these ("?" when there is none)."""
    while frame is not None and (_is_prover(frame) or _is_numpy(frame) or _is_forwarding(frame)):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_qualname}"


def _acting_frame():
    """The frame whose code made the operation being reported: the first one outside this module."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals is globals():
        frame = frame.f_back
    return frame


def declared_mark(frame):
    """The `verispec.reference.audit` mark of the code running in `frame`: the first mark met on
    the way from its module down its qualified name (a class or function marks what it defines),
    else the mark of its module or of a package above it; None when unmarked."""
    scope = None
    for part in frame.f_code.co_qualname.split("."):
        if part == "<locals>":
            break
        scope = frame.f_globals.get(part) if scope is None else getattr(scope, part, None)
        if scope is None:
            break
        mark = mark_of(scope)
        if mark is not None:
            return mark
    name = _module_name(frame)
    while name:
        mark = mark_of(sys.modules.get(name))
        if mark is not None:
            return mark
        name = name.rpartition(".")[0]
    return None


#: The watch of the iteration running now (read by `Vec` and `Token`), or None.
_ACTIVE: ContextVar = ContextVar("verispec_formal_watch", default=None)


def _reporting(op, name):
    """Token's operator `name`: reports the use (as `op`) to the running watch, then answers as int."""
    base = getattr(int, name)

    def method(self, *args):
        watch = _ACTIVE.get()
        if watch is not None:
            watch.token_use(f"{op} {args[0]!r}" if args else op, _acting_frame())
        return base(self, *args)

    return method


class Token(int):
    """A drawn token id that reports being used as a number (ordered, compared with a constant,
    in arithmetic, converted); equality with other drawn ids, hashing and indexing stay silent."""

    __hash__ = int.__hash__

    def __eq__(self, other):
        watch = _ACTIVE.get()
        if watch is not None and isinstance(other, int) and not isinstance(other, Token):
            watch.token_use(f"== {other!r}", _acting_frame())
        return int.__eq__(self, other)

    def __ne__(self, other):
        watch = _ACTIVE.get()
        if watch is not None and isinstance(other, int) and not isinstance(other, Token):
            watch.token_use(f"!= {other!r}", _acting_frame())
        return int.__ne__(self, other)

    __lt__, __le__ = _reporting("<", "__lt__"), _reporting("<=", "__le__")
    __gt__, __ge__ = _reporting(">", "__gt__"), _reporting(">=", "__ge__")
    __add__, __radd__ = _reporting("+", "__add__"), _reporting("+", "__radd__")
    __sub__, __rsub__ = _reporting("-", "__sub__"), _reporting("-", "__rsub__")
    __mul__, __rmul__ = _reporting("*", "__mul__"), _reporting("*", "__rmul__")
    __floordiv__, __mod__ = _reporting("//", "__floordiv__"), _reporting("%", "__mod__")
    __int__, __float__ = _reporting("int()", "__int__"), _reporting("float()", "__float__")
    __bool__, __and__ = _reporting("bool()", "__bool__"), _reporting("&", "__and__")
    __or__, __xor__ = _reporting("|", "__or__"), _reporting("^", "__xor__")


class Vec(np.ndarray):
    """A probability vector [V] handed to the rule: len(), iteration, .shape and .size report a read of V."""

    def __array_wrap__(self, array, context=None, return_scalar=False):
        # a reduction (p.sum()) gives its scalar, as on a plain object array
        if array.ndim == 0:
            return array[()]
        return np.ndarray.__array_wrap__(self, array, context)

    def __len__(self):
        _vocab_read("len() of a probability vector")
        return np.ndarray.__len__(self)

    def __iter__(self):
        _vocab_read("iteration over a probability vector")
        return np.ndarray.__iter__(self)

    @property
    def shape(self):
        _vocab_read(".shape of a probability vector")
        return np.ndarray.shape.__get__(self)

    @property
    def size(self):
        _vocab_read(".size of a probability vector")
        return np.ndarray.size.__get__(self)


def _vocab_read(what):
    watch = _ACTIVE.get()
    if watch is not None:
        watch.vocab_read(what, _acting_frame())


class ModelView(LanguageModel):
    """The model as the rule sees it: its vectors are `Vec`s and reading vocab_size is reported."""

    def __init__(self, model):  # no LanguageModel.__init__: vocab_size is a reporting property
        self.model = model
        self.name = getattr(model, "name", None)
        self.exact = model.exact

    @property
    def vocab_size(self):
        _vocab_read("the model's vocab_size")
        return self.model.vocab_size

    def probs(self, prefix):
        return self.model.probs(prefix).view(Vec)

    def state_key(self, prefix):
        return self.model.state_key(prefix)

    def __getattr__(self, name):
        return getattr(self.__dict__["model"], name)


class RandView:
    """`rand` as the rule sees it: draws are checked and drawn ids come back as `Token`s. A draw's
    finding is placed at the function that called the code drawing (`_drawing_site`)."""

    def __init__(self, rand, watch):
        self.rand, self.watch = rand, watch

    def bernoulli(self, p):
        if not self.watch.depth:
            self.watch.check_coin(p, _drawing_site())
        return self.rand.bernoulli(p)

    def categorical(self, probs):
        if self.watch.depth or _uniform(probs):  # a count, or the order of exchangeable draws: not a token
            return self.rand.categorical(probs)
        source = self.watch.check_draw(probs, _drawing_site())
        return self.watch.record_draw(self.rand.categorical(probs), source)

    def uniform(self):
        if not self.watch.depth:
            self.watch.find(FindingKind.DRAW, "a lazily split rand.uniform() (the criterion covers bernoulli and "
                            "categorical draws only)", True, _drawing_site())
        return self.rand.uniform()


def _drawing_site():
    """Where a draw's finding is placed: the caller of the code that called `rand` (block
    verification's coins are drawn by its helper `last_stop` and reported at `block_rule`)."""
    frame = _acting_frame()
    return frame.f_back if frame is not None else None

    def __getattr__(self, name):
        return getattr(self.rand, name)


def _uniform(probs) -> bool:
    """True for a concrete uniform vector (the order of exchangeable drafted tokens, `Draft.tokens`)."""
    values = np.ndarray.tolist(np.asarray(probs))
    return not any(isinstance(v, Sym) for v in values) and len(set(values)) == 1


class WatchedMethod:
    """A `Method` whose `step` runs under the watch (everything else is the method's own)."""

    def __init__(self, method, watch):
        self.method, self.watch = method, watch

    def __getattr__(self, name):
        return getattr(self.__dict__["method"], name)

    def step(self, target, draft_model, context, rand, **kwargs):
        watch = self.watch
        views = ModelView(target), (ModelView(draft_model) if draft_model is not None else None)
        watch.begin(views)
        previous = sys.getprofile()
        token = _ACTIVE.set(watch)
        sys.setprofile(watch.profile)
        try:
            with observing(watch):
                out = self.method.step(views[0], views[1], context, RandView(rand, watch), **kwargs)
        finally:
            sys.setprofile(previous)
            _ACTIVE.reset(token)
            watch.depth = 0
        watch.end(out)
        return tuple(int.__index__(t) for t in out)


def _vector_key(vec):
    """(model name, prefix) when entry i of `vec` is exactly token i of one model conditional, else None."""
    if not isinstance(vec, np.ndarray):
        return None
    key = None
    for i, x in enumerate(np.ndarray.tolist(vec)):
        reads = reads_of(x)
        if len(reads) != 1:
            return None
        (name, prefix, token), = reads
        if token != i or (key is not None and key != (name, prefix)):
            return None
        key = (name, prefix)
    return key


def _token_of(value):
    """(model name, prefix, token) when `value` is one entry of one conditional, else None."""
    reads = reads_of(value)
    return next(iter(reads)) if len(reads) == 1 else None


class Watch:
    """The findings of one symbolic exploration of a method's iteration (see the module docstring).

    Attributes:
        findings: {`FindingKind`: first `Finding` of that kind}.
        forms: the residual / acceptance tests seen: {("residual" | "accept", target key, draft key,
            weight is 1)}; their count sets the number of sign classes (`cutoff_size`).
        iterations: iterations watched (one per replay of the rule).
    """

    def __init__(self):
        self.findings: dict = {}
        self.forms: set = set()
        self.iterations = 0
        self.depth = 0  # audited primitives open on the stack
        self.marks: dict = {}  # code object -> its declared mark (`declared_mark`), looked up once
        self._begin_path(None)

    def method(self, method):
        """`method` with its step run under this watch (what `prove` explores)."""
        return WatchedMethod(method, self)

    # -- verdicts ------------------------------------------------------------------------------
    @property
    def equivariant(self) -> bool:
        """True when no finding breaks the relabeling symmetry (and at least one iteration was watched)."""
        return self.iterations > 0 and not any(f.breaks_symmetry for f in self.findings.values())

    def cutoff_reasons(self, draft_length: int, num_paths: int) -> list:
        """Why the cutoff theorem does not apply, most specific first ([] when it applies)."""
        K = FindingKind
        first = (K.TWO_TOKEN_COMPARISON, K.FIXED_POINT, K.TOKEN_NOT_DRAWN, K.VOCABULARY_SUM, K.VOCABULARY_SIZE,
                 K.TOKEN_ID)
        reasons = [str(self.findings[k]) for k in first if k in self.findings]
        if draft_length != 1:
            reasons.append(f"multi-step: L = {draft_length} (the cutoff theorem covers one draft position, L = 1: "
                           "at L >= 2 the law sums over drafted tokens it does not emit through the conditionals "
                           "after them, which merging two tokens cannot preserve)")
        if num_paths != 1:
            reasons.append(f"multi-path: K = {num_paths} (the cutoff theorem covers one draft path, K = 1)")
        later = (K.MULTI_STEP, K.DRAW, K.DRAFTED_ARITHMETIC, K.ACCEPTANCE, K.RESIDUAL)
        reasons += [str(self.findings[k]) for k in later if k in self.findings]
        if not self.iterations:
            reasons.append("no iteration was watched")
        return reasons

    def cutoff_size(self, num_tokens: int) -> int:
        """V* = tokens an output names (N) + closed sign cones of the one test form p(z) vs q(z) (2,
        or 1 when the rule makes no per-token test)."""
        return num_tokens + (2 if self.forms else 1)

    # -- bookkeeping ---------------------------------------------------------------------------
    def find(self, kind: FindingKind, message, breaks_symmetry, frame) -> None:
        """Record a finding made by the code of `frame` (the first of each kind is kept); `frame`
        may also be a "where" string."""
        if kind not in self.findings:
            where = frame if isinstance(frame, str) else _where(frame)
            self.findings[kind] = Finding(kind, message, where, breaks_symmetry)

    def _begin_path(self, views):
        self.names = (views[0].name, views[1].name if views[1] is not None else None) if views else (None, None)
        self.draws, self.drawn, self.pending = [], {}, []
        self.residuals, self.accepts = {}, {}

    def begin(self, views) -> None:
        """A new iteration (one replay) starts; `views`: the (target, draft) views it gets."""
        self._begin_path(views)
        self.depth = 0

    def end(self, out) -> None:
        """The iteration emitted `out`: check what it drew and did not emit."""
        self.iterations += 1
        emitted = [int.__index__(t) for t in out]
        root_draft = (self.names[1], ())
        discards = [(t, source) for t, source in self.draws if t not in emitted]
        if len(discards) > 1:
            self.find(FindingKind.MULTI_STEP, f"draws {len(discards)} tokens it does not emit on one path (the "
                      "cutoff theorem covers one discarded draft token)", False, "the iteration")
        elif discards and discards[0][1] != root_draft:
            self.find(FindingKind.MULTI_STEP, f"discards a token drawn from {discards[0][1]}, not from the root "
                      "draft q", False, "the iteration")
        for _, source in self.draws:
            if source is not None and source[0] != "residual" and tuple(emitted[:len(source[1])]) != tuple(source[1]):
                self.find(FindingKind.MULTI_STEP, f"draws from the conditional {source}, after tokens it does not "
                          "emit", False, "the iteration")

    def _mark(self, frame):
        code = frame.f_code
        if code not in self.marks:
            self.marks[code] = declared_mark(frame)
        return self.marks[code]

    def _plumbing(self, frame) -> bool:
        """True when `frame` runs verispec's plumbing (declared, or the prover's own code) or numpy."""
        return frame is None or _is_prover(frame) or _is_numpy(frame) or self._mark(frame) is PLUMBING

    # -- the hooks -----------------------------------------------------------------------------
    def profile(self, frame, event, arg):
        """sys.setprofile hook: track the audited primitives open on the stack."""
        if event not in ("call", "return"):
            return
        kind = self._mark(frame)
        if not isinstance(kind, Primitive):
            return
        if event == "call":
            if not self.depth:
                self._enter(kind, frame.f_locals, frame.f_back)
            self.depth += 1
        else:
            self.depth -= 1
            if not self.depth:
                self._leave(kind, arg)

    def _enter(self, kind, local, caller) -> None:
        """An audited primitive called by the rule (from `caller`): are its arguments what its proof covers?"""
        if kind is Primitive.RESIDUAL:
            self._check_residual(local["p"], local["q"], local["weight"], caller)
        elif kind is Primitive.ACCEPTANCE:
            self._check_acceptance(local["p_x"], local["q_x"], local["weight"], caller)
        elif kind is Primitive.IID_DRAW:
            key = _vector_key(local["q"])
            if key is None:
                self.find(FindingKind.DRAW, "i.i.d. draft tokens drawn from a vector that is not a model "
                          "conditional", True, caller)
            self.pending.append(key)

    def _leave(self, kind, value) -> None:
        if kind is Primitive.RESIDUAL and isinstance(value, np.ndarray):
            self.residuals[id(value)] = value  # kept alive: ids of live objects are unique
        elif kind is Primitive.ACCEPTANCE and isinstance(value, Sym):
            self.accepts[id(value)] = [value, 0]
        elif kind is Primitive.IID_DRAW:
            key = self.pending.pop() if self.pending else None
            if isinstance(value, dict):
                counts = list(value.items())
                value.clear()
                for t, c in counts:
                    value[self.record_draw(t, key)] = c

    def _check_residual(self, p, q, weight, caller) -> None:
        keys = tuple(("residual",) if id(v) in self.residuals else _vector_key(v) for v in (p, q))
        if None in keys:
            self.find(FindingKind.RESIDUAL, "a residual of vectors that are neither model conditionals nor "
                      "residuals", True, caller)
            return
        form = ("residual", keys[0], keys[1], _is_one(weight))
        self.forms.add(form)
        if keys != ((self.names[0], ()), (self.names[1], ())) or not _is_one(weight):
            self.find(FindingKind.RESIDUAL, f"a residual max(w p - q, 0) of {keys[0]} and {keys[1]} with weight "
                      f"{'1' if _is_one(weight) else 'w != 1'} (the cutoff theorem covers norm((p - q)+) of the "
                      "root target and draft conditionals)", False, caller)

    def _check_acceptance(self, p_x, q_x, weight, caller) -> None:
        entries = _token_of(p_x), _token_of(q_x)
        if None in entries or entries[0][1:] != entries[1][1:] or entries[0][2] not in self.drawn:
            self.find(FindingKind.ACCEPTANCE, "an acceptance probability of entries that are not one drawn token's "
                      "p(x) and q(x)", True, caller)
            return
        (p_name, prefix, x), (q_name, _, _) = entries
        self.forms.add(("accept", (p_name, prefix), (q_name, prefix), _is_one(weight)))
        if (p_name, q_name) != self.names or prefix != () or self.drawn[x] != (q_name, ()) or not _is_one(weight):
            self.find(FindingKind.ACCEPTANCE, f"an acceptance probability min(1, w p(x) / q(x)) at the prefix "
                      f"{prefix} with weight {'1' if _is_one(weight) else 'w != 1'} (the cutoff theorem covers the "
                      "root draft token with w = 1)", False, caller)

    def operation(self, kind: Operation, operands, label: str = "") -> None:
        """`verispec.formal.symbolic.observing` hook: an operation on a symbolic value (`label`
        names a fixed point's quantity)."""
        if self.depth:
            return
        reads = frozenset().union(*(reads_of(o) for o in operands))
        if not reads:
            return
        frame = _acting_frame()
        if kind is Operation.FIXED_POINT:
            self.find(FindingKind.FIXED_POINT, f"{label}, the root of an equation over the whole vocabulary", True,
                      frame)
            return
        tokens = {t for _, _, t in reads}
        undrawn = sorted(tokens - self.drawn.keys())
        per_operand = [len({t for _, _, t in reads_of(o)}) for o in operands]
        if kind is Operation.COMPARISON and per_operand == [1, 1] and len(tokens) == 2:
            self.find(FindingKind.TWO_TOKEN_COMPARISON, "a comparison between the probabilities of two tokens (an "
                      "argmax, a max over the vocabulary or a sort)", True, frame)
        elif max(per_operand) >= 2:
            self.find(FindingKind.VOCABULARY_SUM, f"{kind.value} on a quantity computed from several tokens' "
                      "probabilities (a vocabulary-wide or partial sum) outside the audited primitives", True, frame)
        elif undrawn:
            self.find(FindingKind.TOKEN_NOT_DRAWN, f"{kind.value} on the probability of token {undrawn[0]}, which "
                      "the rule did not draw, outside the audited primitives (a count or a test over the "
                      "vocabulary)", True, frame)
        else:
            self.find(FindingKind.DRAFTED_ARITHMETIC, f"{kind.value} on a drafted token's probabilities outside "
                      "the audited primitives (the cutoff theorem covers min(1, p(x) / q(x)) and its complement)",
                      False, frame)

    def vocab_read(self, what, frame) -> None:
        """A read of V (`Vec`, `ModelView`) by the code of `frame`."""
        if not self.depth and not self._plumbing(frame):
            self.find(FindingKind.VOCABULARY_SIZE, f"reads V itself ({what})", False, frame)

    def token_use(self, op, frame) -> None:
        """A drawn token id used as a number (`Token`) by the code of `frame`."""
        if not self.depth and not self._plumbing(frame):
            self.find(FindingKind.TOKEN_ID, f"uses a drawn token id as a number ({op}): a token order or a "
                      "constant id", True, frame)

    def check_coin(self, p, site) -> None:
        """rand.bernoulli(p) called by the rule (`site`: where a finding is placed)."""
        if not isinstance(p, Sym):
            return
        entry = self.accepts.get(id(p))
        if entry is None:
            self.find(FindingKind.DRAW, "a coin whose probability is not an acceptance probability min(1, w p(x) / "
                      "q(x))", True, site)
            return
        entry[1] += 1
        if entry[1] > 1:
            self.find(FindingKind.ACCEPTANCE, "one acceptance probability used in two coins on one path", False, site)

    def check_draw(self, probs, site):
        """rand.categorical(probs) called by the rule: the source of the token (or None)."""
        if id(probs) in self.residuals:
            return ("residual", ())
        key = _vector_key(probs)
        if key is None:
            self.find(FindingKind.DRAW, "a token drawn from a vector that is neither a model conditional nor a "
                      "residual", True, site)
        return key

    def record_draw(self, token, source):
        """Record a token the rule drew from `source`; returns it as a `Token`."""
        value = int.__index__(token) if isinstance(token, int) else int(token)
        self.drawn.setdefault(value, source)
        self.draws.append((value, source))
        return Token(value)


def _is_one(weight) -> bool:
    return not isinstance(weight, Sym) and weight == 1
