"""Freed buffers stay in the process (so the next one is not page-faulted anew)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_CHILD = """
import os
import torch
from evalpipe.backends.local import allocator

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

print(allocator.keep_freed_memory())
buf = torch.ones(64 * 2**20 // 4)  # 64 MiB, above glibc's largest mmap threshold
held = rss_mib()
del buf
print(held - rss_mib())  # MiB given back to the system when freed
"""


def _run(keep: str) -> tuple[str, float]:
    env = {**os.environ, "EVALPIPE_KEEP_MEMORY": keep}
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return out[0], float(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_memory_is_kept_unless_switched_off():
    kept, returned = _run("1")
    assert kept == "True" and returned < 8
    kept, returned = _run("0")
    assert kept == "False" and returned > 56  # malloc as it is: the 64 MiB go back at once


_MANY = """
import os
import torch
from evalpipe.backends.local import allocator

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

allocator.keep_freed_memory()
bufs = [torch.ones(24 * 2**20 // 4) for _ in range(56)]  # 1.3 GiB of cache-sized buffers
held = rss_mib()
del bufs
print(held - rss_mib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_more_than_a_gibibyte_freed_at_once_is_kept():
    """A RAG cell frees its first wave's caches (over 1 GiB) together: they stay for the
    next cell instead of being faulted in anew."""
    out = subprocess.run([sys.executable, "-c", _MANY], capture_output=True, text=True,
                         check=True, env={**os.environ, "EVALPIPE_KEEP_MEMORY": "1"})
    assert float(out.stdout.split()[0]) < 64


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's madvise")
def test_only_a_mapped_files_pages_are_let_go_and_they_read_back_the_same(tmp_path):
    """A weight's pages of its mapped file are dropped and read again from the file when
    touched; anonymous memory (a weight the load converted, a tensor computed) is never
    dropped, since that would lose it."""
    import torch
    from transformers import AutoModelForCausalLM

    from evalpipe.backends.local import allocator
    from tests import helpers

    helpers.tiny_llama(hidden_size=256, intermediate_size=1024).save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    weight = model.model.layers[0].mlp.up_proj.weight  # 1 MiB
    copy = weight.detach().clone()
    assert allocator.release_file_pages(weight, allocator.file_mappings()) >= 2**20 - 8192
    assert torch.equal(weight, copy)
    assert allocator.release_file_pages(copy, allocator.file_mappings()) == 0
    assert torch.equal(weight, copy)
    assert allocator.release_file_pages(weight, []) == 0  # in no mapping it was given
