"""The dtype a bench runs in, chosen by hardware (`--dtype auto`), and what the host can do.

bfloat16 halves the bytes a forward reads, which is what a decode step is bound by, but only where
the arithmetic is native: on CUDA GPUs that support it, and on CPUs with AVX512-BF16 or AMX-BF16
instructions. Elsewhere (e.g. an AVX2 CPU) torch emulates bf16 matrix products, and a multi-row
forward (the verification of L + 1 tokens) costs many times a one-row forward, so float32 is the
faster and the safer choice (`benchmarks/bench_rows.py` measures both on a host).

    choose_dtype("cpu")            -> ("bfloat16", "CPU has native bf16 (avx512_bf16)") or ("float32", ...)
    resolve_dtype("auto", "cuda")  -> ("bfloat16", "CUDA device supports bf16")
    host_info("cpu")               -> {"cpu_capability": "AVX512", "cpu_flags": [...], "native_bf16": True}
"""

from __future__ import annotations

import platform

__all__ = ["DTYPES", "NATIVE_BF16_FLAGS", "cpu_flags", "cpu_name", "choose_dtype", "resolve_dtype", "host_info"]

#: Dtypes `--dtype` accepts besides "auto".
DTYPES = ("bfloat16", "float32", "float16")
#: /proc/cpuinfo flags of native bf16 arithmetic (AVX512-BF16 dot products; AMX bf16 tiles).
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: Flags recorded with a bench's results (what decides the speed of a CPU forward).
REPORTED_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                  "amx_int8")


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset:
    """The CPU's feature flags from the first "flags" line of `path` (Linux); empty when unreadable
    (other systems: the choice then falls back to float32)."""
    value = _cpuinfo_value(path, ("flags", "Features"))
    return frozenset() if value is None else frozenset(value.split())


def cpu_name(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name: the first "model name" line of `path` (Linux), else
    `platform.processor()` (may be ""). Two CPUs of one torch capability can differ in speed by 2x
    or more (e.g. an AMX Xeon and an EPYC, both "AVX512"), so the bench records it and keys its
    cost models by it."""
    value = _cpuinfo_value(path, ("model name",))
    return platform.processor() if value is None else value.strip()


def _cpuinfo_value(path: str, keys: tuple) -> str | None:
    """The text after the colon of the first line of `path` that starts with one of `keys`; None
    where no line does or the file cannot be read."""
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith(keys):
                    return line.split(":", 1)[1]
    except OSError:
        pass
    return None


def _cuda_bf16(device) -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def choose_dtype(device, flags=None, cuda_bf16=None) -> tuple[str, str]:
    """The dtype `--dtype auto` picks on `device` -> (dtype name, the reason in words).

    Args:
        device: "cpu", "cuda", "cuda:i" (a str or torch.device); other devices get float32.
        flags: the CPU flags (default `cpu_flags()`); tests pass their own.
        cuda_bf16: whether the CUDA device supports bf16 (default: torch's answer).

    Returns:
        ("bfloat16", reason) on CUDA with bf16 support and on CPUs with a flag of
        `NATIVE_BF16_FLAGS`; ("float16", reason) on CUDA without bf16; ("float32", reason) elsewhere.
    """
    kind = str(device).split(":", 1)[0]
    if kind == "cuda":
        supported = _cuda_bf16(device) if cuda_bf16 is None else bool(cuda_bf16)
        return ("bfloat16", "CUDA device supports bf16") if supported else (
            "float16", "CUDA device without bf16 support")
    if kind != "cpu":
        return "float32", f"device type {kind!r}: no native-bf16 check, float32"
    flags = cpu_flags() if flags is None else frozenset(flags)
    native = [flag for flag in NATIVE_BF16_FLAGS if flag in flags]
    if native:
        return "bfloat16", f"CPU has native bf16 ({', '.join(native)})"
    return "float32", "CPU without native bf16 (no avx512_bf16/amx_bf16 flag): bf16 would be emulated"


def resolve_dtype(requested: str, device, flags=None) -> tuple[str, str]:
    """`requested` ("auto" or one of `DTYPES`) -> (dtype name, reason).

    Raises:
        ValueError: an unknown dtype name.
    """
    if requested == "auto":
        return choose_dtype(device, flags)
    if requested not in DTYPES:
        raise ValueError(f"dtype: expected 'auto' or one of {', '.join(DTYPES)}, got {requested!r}")
    return requested, "requested"


def host_info(device, flags=None) -> dict:
    """What decides forward speed on this host: torch's CPU capability (the vector ISA its
    kernels dispatch to), the relevant CPU flags, and whether bf16 is native."""
    import torch

    flags = cpu_flags() if flags is None else frozenset(flags)
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_flags": [flag for flag in REPORTED_FLAGS if flag in flags],
            "native_bf16": any(flag in flags for flag in NATIVE_BF16_FLAGS)}
