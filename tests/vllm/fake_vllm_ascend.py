"""A minimal ``vllm_ascend`` package tree written into a test's temporary folder, for what the real package
cannot show on a CPU: ACL graph capture and replay of the drafter (the emulated NPU runs vllm-ascend eager) and a
drafter whose confidences are a known function of its inputs (the oracle of the verify scheduler's lengths).

Everything else about vllm-ascend is checked against the real 0.30.0rc2 package in ``.venv-vllm-ascend``
(tests/vllm_ascend_emu/test_adapter_real.py: versions, register targets, the ``additional_config`` key, DFlash2,
the runner's overrides; test_adapter_engine.py: the adapter inside vllm-ascend's own runner). The names mirrored
here are the ones these tests reach, as read from vllm-ascend 0.30.0rc2's sdist:

* ``worker/model_runner_v1.py``: ``NPUModelRunner(GPUModelRunner)``; ``__init__(vllm_config, device)`` calls
  ``super().__init__`` then ``_set_up_drafter()``, which takes ``_get_drafter()`` and asserts
  ``isinstance(self.drafter, AscendDSparkProposer)`` for DSpark; ``take_draft_token_ids`` cuts each request's
  drafts to ``drafter.dynamic_spec.num_verify_tokens[b]`` (clamped to [0, K]), one ``int()`` per request;
* ``spec_decode/``: ``AscendSpecDecodeBaseProposer._propose`` asking
  ``self.runner.cudagraph_dispatcher.dispatch(num_tokens=, uniform_decode=, has_lora=)`` and calling
  ``self.dynamic_spec.update(logits=)`` (DFlash) or ``update(model=, last_hidden_states=, draft_token_ids=,
  num_reqs=)`` (DSpark); ``AscendEagleProposer`` -> ``AscendDflashProposer`` -> ``AscendDSparkProposer``;
  ``dummy_run(num_tokens, num_reqs=0, num_tokens_across_dp=None, aclgraph_runtime_mode=NONE,
  batch_descriptor=None, ...)``; ``utils.DynamicSpecScheduler``;
* ``compilation/acl_graph.py``: ``ACLGraphWrapper(runnable, vllm_config, runtime_mode, cudagraph_options=None, *,
  use_eagle=False, enable_enpu=False, update_stream=None)`` (graphs keyed by the forward context's
  BatchDescriptor in FULL mode), ``GraphParams`` and ``set_/get_draft_graph_params``;
* ``ascend_config.get_ascend_config().dynamic_spec_config.method``; ``spec_decode/dflash2_proposer.is_dflash2_draft``.

The bodies are this test's own small stand-ins (a linear "drafter" whose logits are a fixed function of its
inputs, graph entries recorded instead of captured), enough to run the adapter's code paths on CPU.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

SUPPORTED_VERSION = "0.30.0rc2"
PAIRED_VLLM = "0.30.0"  # the vLLM release vllm-ascend 0.30.0rc2 runs with

FILES = {
    "__init__.py": """
        def register():
            return "vllm_ascend.platform.NPUPlatform"
    """,
    "_version.py": """
        __version__ = version = "{version}"
    """,
    "ascend_config.py": """
        class DynamicSpecConfig:
            SUPPORTED_METHODS = ("dspark", "dflash")

            def __init__(self, config=None):
                config = config or {{}}
                self.method = config.get("method")
                self.method_params = config.get("method_params", {{}})


        class _AscendConfig:
            def __init__(self, additional_config):
                self.dynamic_spec_config = DynamicSpecConfig((additional_config or {{}}).get("dynamic_spec_config"))


        _ASCEND_CONFIG = None


        def init_ascend_config(vllm_config):
            global _ASCEND_CONFIG
            _ASCEND_CONFIG = _AscendConfig(vllm_config.additional_config)
            return _ASCEND_CONFIG


        def get_ascend_config():
            if _ASCEND_CONFIG is None:
                raise RuntimeError("Ascend config is not initialized. Please call init_ascend_config first.")
            return _ASCEND_CONFIG
    """,
    "ascend_forward_context.py": """
        import contextlib

        from vllm.config import CUDAGraphMode

        CURRENT = {{"batch_descriptor": None, "mode": CUDAGraphMode.NONE}}


        @contextlib.contextmanager
        def set_ascend_forward_context(attn_metadata, vllm_config, *, batch_descriptor=None,
                                       aclgraph_runtime_mode=CUDAGraphMode.NONE, **kwargs):
            saved = dict(CURRENT)
            CURRENT.update(batch_descriptor=batch_descriptor, mode=aclgraph_runtime_mode)
            try:
                yield
            finally:
                CURRENT.update(saved)
    """,
    "compilation/__init__.py": "",
    "compilation/acl_graph.py": '''
        from dataclasses import dataclass

        from vllm.config import CUDAGraphMode

        from vllm_ascend.ascend_forward_context import CURRENT


        class ACLGraphWrapper:
            """Graph entries keyed by the forward context's BatchDescriptor in the wrapper's mode."""

            def __init__(self, runnable, vllm_config, runtime_mode, cudagraph_options=None, *,
                         use_eagle=False, enable_enpu=False, update_stream=None):
                self.runnable = runnable
                self.runtime_mode = runtime_mode
                self.concrete_aclgraph_entries = {{}}
                self.replays = []
                self.eager_calls = 0

            def __call__(self, *args, **kwargs):
                desc, mode = CURRENT["batch_descriptor"], CURRENT["mode"]
                if mode == CUDAGraphMode.NONE or mode != self.runtime_mode:
                    self.eager_calls += 1
                    return self.runnable(*args, **kwargs)
                if desc not in self.concrete_aclgraph_entries:
                    self.concrete_aclgraph_entries[desc] = "captured"
                else:
                    self.replays.append(desc)
                return self.runnable(*args, **kwargs)

            def unwrap(self):
                return self.runnable


        @dataclass
        class GraphParams:
            events: dict
            workspaces: dict
            handles: dict
            attn_params: dict


        _graph_params = None
        _draft_graph_params = None


        def _params(sizes):
            return GraphParams({{s: [] for s in sizes}}, {{s: None for s in sizes}}, {{s: [] for s in sizes}},
                               {{s: [] for s in sizes}})


        def set_graph_params(aclgraph_capture_sizes):
            global _graph_params
            if _graph_params is not None:
                raise ValueError("Graph parameters have already been set!")
            _graph_params = _params(aclgraph_capture_sizes)


        def get_graph_params():
            return _graph_params


        def set_draft_graph_params(aclgraph_capture_sizes):
            global _draft_graph_params
            if _draft_graph_params is not None:
                raise ValueError("DraftGraph parameters have already been set!")
            _draft_graph_params = _params(aclgraph_capture_sizes)


        def get_draft_graph_params():
            return _draft_graph_params
    ''',
    "ops/__init__.py": "",
    "ops/gdn.py": """
        from vllm.model_executor.layers.mamba.gdn.base import GatedDeltaNetAttention


        class AscendGatedDeltaNetAttention(GatedDeltaNetAttention):
            def _forward_core(self, mixed_qkv, b, a, core_attn_out):
                raise RuntimeError("vllm-ascend's GDN core needs torch_npu")
    """,
    "spec_decode/__init__.py": """
        from vllm_ascend.spec_decode.dflash_proposer import AscendDflashProposer
        from vllm_ascend.spec_decode.dspark_proposer import AscendDSparkProposer
        from vllm_ascend.spec_decode.eagle_proposer import AscendEagleProposer


        def get_spec_decode_method(method, vllm_config, device, runner):
            if method == "dspark":
                return AscendDSparkProposer(vllm_config, device, runner)
            if method in ("eagle", "eagle3", "mtp"):
                return AscendEagleProposer(vllm_config, device, runner)
            if method == "dflash":
                return AscendDflashProposer(vllm_config, device, runner)
            raise ValueError(f"Unknown speculative decoding method: {{method}}")
    """,
    "spec_decode/utils.py": """
        class DynamicSpecScheduler:
            def __init__(self, *, method, method_params, max_batch_size, num_speculative_tokens, device):
                self.method = method
                self.num_verify_tokens = None

            def update(self, *, logits=None, model=None, last_hidden_states=None, draft_token_ids=None,
                       num_reqs=None):
                raise RuntimeError("vllm-ascend's own scheduler is not what the adapter runs")
    """,
    "spec_decode/llm_base_proposer.py": """
        import torch
        from vllm.config import CUDAGraphMode

        from vllm_ascend.ascend_forward_context import set_ascend_forward_context
        from vllm_ascend.compilation.acl_graph import ACLGraphWrapper


        class AscendSpecDecodeBaseProposer:
            def __init__(self, vllm_config, device, pass_hidden_states_to_model, runner=None):
                self.vllm_config = vllm_config
                self.device = device
                self.runner = runner
                self.method = vllm_config.speculative_config.method
                self.num_speculative_tokens = vllm_config.speculative_config.num_speculative_tokens
                self.max_batch_size = vllm_config.scheduler_config.max_num_seqs
                self.use_cuda_graph = runner._use_aclgraph() and not vllm_config.speculative_config.enforce_eager
                self.model = runner.draft_model
                self._runnable = self._run_merged_draft
                if self.use_cuda_graph:
                    self._runnable = ACLGraphWrapper(self._run_merged_draft, vllm_config, CUDAGraphMode.FULL)

            def _query_per_req(self):
                return 1 + self.num_speculative_tokens

            def _propose(self, num_speculative_tokens, target_token_ids, target_positions, target_hidden_states,
                         next_token_ids, token_indices_to_sample, common_attn_metadata, target_model_batch_desc,
                         sampling_metadata, mm_embed_inputs=None, req_scheduled_tokens=None,
                         long_seq_metadata=None, num_prefill_reqs=0, num_decode_reqs=0, scheduler_output=None,
                         num_scheduled_tokens=0, num_rejected_tokens_gpu=None):
                self.num_speculative_tokens = num_speculative_tokens
                batch_size = next_token_ids.shape[0]
                num_tokens = batch_size * self._query_per_req()
                if self.use_cuda_graph:
                    mode, desc = self.runner.cudagraph_dispatcher.dispatch(
                        num_tokens=num_tokens, uniform_decode=target_model_batch_desc.uniform, has_lora=False
                    )
                else:
                    mode, desc = CUDAGraphMode.NONE, None
                with set_ascend_forward_context(None, self.vllm_config, batch_descriptor=desc,
                                                aclgraph_runtime_mode=mode):
                    return self._runnable(next_token_ids, batch_size)

            def _run_merged_draft(self, next_token_ids, batch_size):
                k = self.num_speculative_tokens
                hidden = self.model.embed(next_token_ids)  # [B, H]
                blocks = hidden[:, None, :] + self.model.position_bias[None, :k, :]  # [B, K, H]
                logits = self.model.lm_head(blocks.reshape(batch_size * k, -1))
                draft_token_ids = logits.argmax(dim=-1).view(batch_size, k)
                if self.method == "dspark":
                    seeded = torch.cat([next_token_ids[:, None], draft_token_ids], dim=1)
                    if self.dynamic_spec is not None:
                        self.dynamic_spec.update(model=self.model, last_hidden_states=blocks.reshape(batch_size * k, -1),
                                                 draft_token_ids=seeded, num_reqs=batch_size)
                    return seeded[:, 1:]
                if self.dynamic_spec is not None:
                    self.dynamic_spec.update(logits=logits)
                return draft_token_ids

            def dummy_run(self, num_tokens, with_prefill=False, in_graph_capturing=False, num_reqs=0,
                          num_tokens_across_dp=None, aclgraph_runtime_mode=CUDAGraphMode.NONE,
                          batch_descriptor=None, dummy_compute_logits=lambda hidden_states: None,
                          is_profile=False, **kwargs):
                raise NotImplementedError
    """,
    "spec_decode/eagle_proposer.py": """
        from vllm_ascend.spec_decode.llm_base_proposer import AscendSpecDecodeBaseProposer


        class AscendEagleProposer(AscendSpecDecodeBaseProposer):
            def __init__(self, vllm_config, device, runner=None):
                super().__init__(vllm_config, device, True, runner=runner)
    """,
    "spec_decode/dflash_proposer.py": """
        import torch
        from vllm.config import CUDAGraphMode

        from vllm_ascend.ascend_config import get_ascend_config
        from vllm_ascend.ascend_forward_context import set_ascend_forward_context
        from vllm_ascend.spec_decode.eagle_proposer import AscendEagleProposer
        from vllm_ascend.spec_decode.utils import DynamicSpecScheduler


        class AscendDflashProposer(AscendEagleProposer):
            def __init__(self, vllm_config, device, runner=None):
                super().__init__(vllm_config, device, runner=runner)
                self.max_query_tokens = self.max_batch_size * (1 + self.num_speculative_tokens)
                dynamic_spec_config = get_ascend_config().dynamic_spec_config
                self.dynamic_spec = None
                if dynamic_spec_config.method == "dflash":
                    self.dynamic_spec = DynamicSpecScheduler(
                        method="dflash", method_params=dynamic_spec_config.method_params,
                        max_batch_size=self.max_batch_size, num_speculative_tokens=self.num_speculative_tokens,
                        device=device,
                    )

            @torch.inference_mode()
            def dummy_run(self, num_tokens, num_reqs=0, num_tokens_across_dp=None,
                          aclgraph_runtime_mode=CUDAGraphMode.NONE, batch_descriptor=None,
                          dummy_compute_logits=lambda hidden_states: None, is_profile=False, **kwargs):
                if not self.use_cuda_graph:
                    aclgraph_runtime_mode = CUDAGraphMode.NONE
                with set_ascend_forward_context(None, self.vllm_config, batch_descriptor=batch_descriptor,
                                                aclgraph_runtime_mode=aclgraph_runtime_mode):
                    saved, self.dynamic_spec = self.dynamic_spec, None
                    try:
                        self._runnable(torch.zeros(max(num_reqs, 1), dtype=torch.long), max(num_reqs, 1))
                    finally:
                        self.dynamic_spec = saved
    """,
    "spec_decode/dflash2_proposer.py": """
        def is_dflash2_draft(speculative_config):
            if speculative_config.method != "dflash":
                return False
            draft = getattr(speculative_config, "draft_model_config", None)
            return "DFlash2DraftModel" in (getattr(draft, "architectures", None) or [])
    """,
    "spec_decode/dspark_proposer.py": """
        from vllm_ascend.ascend_config import get_ascend_config
        from vllm_ascend.spec_decode.dflash_proposer import AscendDflashProposer
        from vllm_ascend.spec_decode.utils import DynamicSpecScheduler


        class AscendDSparkProposer(AscendDflashProposer):
            def __init__(self, vllm_config, device, runner=None):
                super().__init__(vllm_config, device, runner=runner)
                self.sample_from_anchor = True
                self.num_query_per_req = self.num_speculative_tokens
                dynamic_spec_config = get_ascend_config().dynamic_spec_config
                self.dynamic_spec = None
                if dynamic_spec_config.method == "dspark":
                    self.dynamic_spec = DynamicSpecScheduler(
                        method="dspark", method_params=dynamic_spec_config.method_params,
                        max_batch_size=self.max_batch_size, num_speculative_tokens=self.num_speculative_tokens,
                        device=device,
                    )
                self.use_cuda_graph = False
                self._runnable = self._run_merged_draft

            def _query_per_req(self):
                return self.num_query_per_req
    """,
    "worker/__init__.py": "",
    "worker/model_runner_v1.py": """
        from vllm.v1.outputs import DraftTokenIds
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        from vllm_ascend.spec_decode import get_spec_decode_method
        from vllm_ascend.spec_decode.dflash_proposer import AscendDflashProposer
        from vllm_ascend.spec_decode.dspark_proposer import AscendDSparkProposer
        from vllm_ascend.spec_decode.eagle_proposer import AscendEagleProposer


        class _InputBatch:  # the real runner's persistent batch: the requests of the step, in row order
            def __init__(self):
                self.req_ids = []


        class NPUModelRunner(GPUModelRunner):
            def __init__(self, vllm_config, device):
                super().__init__(vllm_config, device)
                self.input_batch = _InputBatch()
                self._set_up_drafter()

            def _set_up_drafter(self):
                self.drafter = None
                if self.speculative_config:
                    self.drafter = self._get_drafter()
                    if self.speculative_config.method == "eagle3":
                        assert isinstance(self.drafter, AscendEagleProposer)
                    elif self.speculative_config.method == "dspark":
                        assert isinstance(self.drafter, AscendDSparkProposer)
                    elif self.speculative_config.method == "dflash":
                        assert isinstance(self.drafter, AscendDflashProposer)

            def _get_drafter(self):
                return get_spec_decode_method(self.speculative_config.method, self.vllm_config, self.device, self)

            def _use_aclgraph(self):
                return self.use_aclgraph

            def take_draft_token_ids(self):
                out = DraftTokenIds(req_ids=list(self.input_batch.req_ids), draft_token_ids=self.last_draft_token_ids.tolist())
                dynamic_spec = getattr(self.drafter, "dynamic_spec", None)
                if dynamic_spec is None or dynamic_spec.num_verify_tokens is None:
                    return out
                k_max = self.speculative_config.num_speculative_tokens
                per_req_k = [max(0, min(int(k), k_max)) for k in dynamic_spec.num_verify_tokens]
                return DraftTokenIds(
                    req_ids=out.req_ids,
                    draft_token_ids=[tokens[:k] for tokens, k in zip(out.draft_token_ids, per_req_k)],
                )
    """,
}


def write_tree(root: Path, *, version: str = SUPPORTED_VERSION) -> Path:
    """Write the package under ``root/vllm_ascend`` and return ``root`` (put it on sys.path to import it)."""
    pkg = root / "vllm_ascend"
    for rel, body in FILES.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body).format(version=version).lstrip())
    return root


def forget() -> None:
    """Drop every imported fake module (and the adapter's modules that bound to it) from sys.modules."""
    for name in list(sys.modules):
        if name == "vllm_ascend" or name.startswith("vllm_ascend."):
            del sys.modules[name]
    sys.modules.pop("ascend_spec.vllm.ascend.proposers", None)
