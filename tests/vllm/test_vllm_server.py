"""The plugin in vLLM's OpenAI-compatible server, switched on as docs/vllm.md tells a user: it says so in the
server's log, and a greedy completion equals a plain server's, token for token."""

from __future__ import annotations

import json

import pytest
from engine_helpers import PROMPTS
from server_helpers import serve

pytestmark = pytest.mark.slow  # on 0.32.0 (the main suite); its 0.30.0 run passed by hand (docs/vllm.md)

COMMON = [
    "--skip-tokenizer-init",  # the tiny models have no tokenizer: prompts and outputs are token ids
    "--dtype",
    "bfloat16",
    "--max-model-len",
    "512",
    "--max-num-seqs",
    "4",
    "--enforce-eager",
    "--no-enable-prefix-caching",
    "--kv-cache-memory-bytes",
    str(64 << 20),
    "--mamba-ssm-cache-dtype",
    "float32",
    "--no-async-scheduling",
    "--seed",
    "0",
]
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
MAX_TOKENS = 16


def test_server_with_the_plugin_logs_it_and_matches_a_plain_server(engine_dir, hybrid_low_entropy) -> None:
    target = hybrid_low_entropy.target
    prompts = PROMPTS[:3]
    with serve(target, engine_dir / "server_plain", COMMON) as plain:
        expected = [plain.complete(p, MAX_TOKENS) for p in prompts]
    assert "ascend-spec" not in plain.log.read_text()  # installed, not enabled: not a word from the plugin
    enabled = [
        *COMMON,
        "--speculative-config",
        json.dumps(NGRAM),
        "--additional-config",
        json.dumps({"ascend_spec": {}}),
    ]
    with serve(target, engine_dir / "server_plugin", enabled) as server:
        got = [server.complete(p, MAX_TOKENS) for p in prompts]
    log = server.log.read_text()
    assert all(len(t) == MAX_TOKENS for t in expected)
    assert got == expected
    lines = [line for line in log.splitlines() if "ascend-spec" in line and "GDN layers verify" in line]
    assert lines, log[-3000:]
    assert (
        "2 GDN layers verify ragged drafts on one state slot per request; drafter NgramProposer" in lines[0]
    )
