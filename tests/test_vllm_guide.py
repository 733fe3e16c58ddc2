"""vLLM's MooncakeStoreConnector guide, end to end with our binaries.

The guide (upstream docs/source/deployment/integrations/vllm/kv-cache-storage.md and
vllm-mooncakestoreconnector.md) starts ``mooncake_master --port <port>``, writes a JSON config
with human-readable sizes, points MOONCAKE_CONFIG_PATH at it and runs a kv_producer and a
kv_consumer vLLM instance. This test replays the store calls those connectors make, in two real
processes: each loads the config through MOONCAKE_CONFIG_PATH and calls setup() with its seven
positional arguments as the connector does; the producer hashes token blocks into keys (a
prefix-chained SHA-256, as vLLM's block hashes), asks batch_is_exist, registers its KV-cache
tensors and stores the blocks with batch_put_from, and stores a serialized tensor with put; the
consumer finds them with is_exist / batch_is_exist, loads them with batch_get_into into its own
registered KV cache and get, checks every byte, and both close."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

from conftest import free_port, stop, wait_port
from test_store import ROOT, master_bin

COMMON = textwrap.dedent("""
    import hashlib, os, sys
    sys.path.insert(0, os.environ["MC_TEST_PYTHONPATH"])
    import torch
    from mooncake.mooncake_config import MooncakeConfig
    from mooncake.store import MooncakeDistributedStore

    BLOCK_TOKENS, LAYERS, HEADS, HEAD_DIM = 16, 4, 8, 64
    MODEL = "meta-llama/Llama-3.1-8B-Instruct"

    def block_keys(tokens):
        keys, parent = [], b"None"
        for i in range(0, len(tokens) - len(tokens) % BLOCK_TOKENS, BLOCK_TOKENS):
            h = hashlib.sha256(parent + repr(tuple(tokens[i:i + BLOCK_TOKENS])).encode()).hexdigest()
            keys.append(f"{MODEL}@tp_rank:0@{h}")
            parent = h.encode()
        return keys

    def kv_cache(dtype):
        # one tensor per layer, [blocks, 2 (k/v), block_tokens, heads, head_dim]
        return [torch.zeros(8, 2, BLOCK_TOKENS, HEADS, HEAD_DIM, dtype=dtype) for _ in range(LAYERS)]

    def fill(cache, seed):
        g = torch.Generator().manual_seed(seed)
        for t in cache:
            t.copy_(torch.randn(t.shape, generator=g).to(t.dtype))

    config = MooncakeConfig.load_from_env()
    store = MooncakeDistributedStore()
    rc = store.setup(config.local_hostname, config.metadata_server, config.global_segment_size,
                     config.local_buffer_size, config.protocol, config.device_name,
                     config.master_server_address)
    assert rc == 0, rc
    tokens = list(range(1000, 1000 + 5 * BLOCK_TOKENS + 3))  # 5 full blocks and a partial one
    keys = block_keys(tokens)
    assert len(keys) == 5
""")

PRODUCER = COMMON + textwrap.dedent("""
    assert store.batch_is_exist(keys) == [0] * 5
    for dtype in (torch.bfloat16, torch.float16):
        cache = kv_cache(dtype)
        fill(cache, 7)
        for t in cache:
            assert store.register_buffer(t.data_ptr(), t.numel() * t.element_size()) == 0
        # block b of layer l: cache[l][b], contiguous
        lk, ptrs, sizes = [], [], []
        for l, t in enumerate(cache):
            for b, k in enumerate(keys):
                blk = t[b]
                lk.append(f"{k}@{dtype}@layer{l}")
                ptrs.append(blk.data_ptr())
                sizes.append(blk.numel() * blk.element_size())
        assert store.batch_put_from(lk, ptrs, sizes) == [0] * len(lk)
        for t in cache:
            assert store.unregister_buffer(t.data_ptr()) == 0
    # a serialized tensor (the V0 connector's put of tensor bytes)
    hidden = torch.arange(4096, dtype=torch.float32).reshape(32, 128) * 0.5
    assert store.put(keys[0] + "@hidden", hidden.numpy().tobytes()) == 0
    assert store.batch_is_exist([k + "@torch.bfloat16@layer0" for k in keys]) == [1] * 5
    print("PRODUCED", flush=True)
    sys.stdin.readline()  # keep this instance (its segment) up until the consumer is done
    assert store.close() == 0
""")

CONSUMER = COMMON + textwrap.dedent("""
    assert store.is_exist(keys[0] + "@hidden") == 1
    assert store.is_exist(keys[0] + "@nope") == 0
    other = block_keys(list(range(5 * BLOCK_TOKENS)))
    for dtype in (torch.bfloat16, torch.float16):
        assert store.batch_is_exist([k + f"@{dtype}@layer3" for k in keys + other]) == [1] * 5 + [0] * 5
        want = kv_cache(dtype)
        fill(want, 7)
        cache = kv_cache(dtype)
        for t in cache:
            assert store.register_buffer(t.data_ptr(), t.numel() * t.element_size()) == 0
        lk, ptrs, sizes = [], [], []
        for l, t in enumerate(cache):
            for b, k in enumerate(keys):
                blk = t[b]
                lk.append(f"{k}@{dtype}@layer{l}")
                ptrs.append(blk.data_ptr())
                sizes.append(blk.numel() * blk.element_size())
        assert store.batch_get_into(lk, ptrs, sizes) == sizes
        for l in range(LAYERS):
            got = cache[l][:5].contiguous().view(torch.uint8)
            exp = want[l][:5].contiguous().view(torch.uint8)
            assert torch.equal(got, exp), (dtype, l)
            assert not cache[l][5:].any()  # blocks 5.. were not requested: untouched
        for t in cache:
            assert store.unregister_buffer(t.data_ptr()) == 0
    hidden = torch.frombuffer(bytearray(store.get(keys[0] + "@hidden")), dtype=torch.float32).reshape(32, 128)
    assert torch.equal(hidden, torch.arange(4096, dtype=torch.float32).reshape(32, 128) * 0.5)
    assert store.close() == 0
    print("CONSUMED", flush=True)
""")


def mooncake_master() -> str:
    return shutil.which("mooncake_master") or master_bin()


def test_vllm_mooncake_store_connector_guide(tmp_path):
    port, http_port, metrics_port = free_port(), free_port(), free_port()
    master = subprocess.Popen(
        [mooncake_master(), "--port", str(port), f"--metrics_port={metrics_port}",
         "--enable_http_metadata_server=true", f"--http_metadata_server_port={http_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    producer = None
    try:
        assert master.stdout.readline().startswith("MOONCAKE_MASTER_READY")
        wait_port(http_port, master)
        cfg = tmp_path / "mooncake_config.json"
        cfg.write_text(json.dumps({
            "local_hostname": "127.0.0.1",
            "metadata_server": f"http://127.0.0.1:{http_port}/metadata",
            "master_server_address": f"127.0.0.1:{port}",
            "global_segment_size": "64MB",
            "local_buffer_size": "32 MB",
            "protocol": "tcp",
            "device_name": "",
        }))
        env = dict(os.environ, MOONCAKE_CONFIG_PATH=str(cfg), MC_TEST_PYTHONPATH=os.path.join(ROOT, "python"))
        producer = subprocess.Popen([sys.executable, "-c", PRODUCER], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True, env=env)
        line = producer.stdout.readline()
        assert line.strip() == "PRODUCED", line
        consumer = subprocess.run([sys.executable, "-c", CONSUMER], capture_output=True, text=True, env=env,
                                  timeout=300)
        assert consumer.returncode == 0, consumer.stderr[-3000:]
        assert consumer.stdout.strip() == "CONSUMED"
        producer.stdin.close()
        assert producer.wait(timeout=60) == 0
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait()
        stop(master)
