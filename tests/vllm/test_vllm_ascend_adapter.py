"""The vllm-ascend adapter on a fake ``vllm_ascend`` tree (tests/vllm/fake_vllm_ascend.py, names of vllm-ascend
0.30.0rc2) for what the real package cannot show on a CPU: the drafter's ACL graphs captured and replayed on its
own B x Q, and the verify scheduler's lengths against a float64 oracle of a drafter with known confidences; plus
the refusals before patching and the settings' checks. The real package is tested in ``.venv-vllm-ascend``
(tests/vllm_ascend_emu/test_adapter_real.py, test_adapter_engine.py). vLLM (0.32.0 CPU) is real; its
``GPUModelRunner.__init__`` body is replaced by a light one (the plugin's wrapper around it is the real one)."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm", reason="the adapter tests import vLLM's runner and configs")

import fake_vllm_ascend as fake  # noqa: E402
import vllm  # noqa: E402
from vllm.config import CUDAGraphMode  # noqa: E402
from vllm.forward_context import BatchDescriptor  # noqa: E402
from vllm.v1.worker import gpu_model_runner  # noqa: E402

from ascend_spec.graph.controller import BudgetController  # noqa: E402
from ascend_spec.graph.cost_profile import CostProfile  # noqa: E402
from ascend_spec.ops import allocate_verify_budget  # noqa: E402
from ascend_spec.vllm import gdn_setup  # noqa: E402
from ascend_spec.vllm.ascend import is_npu_runner, vllm_ascend_importable  # noqa: E402
from ascend_spec.vllm.ascend.verify_scheduler import AscendSpecDynamicSpec  # noqa: E402
from ascend_spec.vllm.config import parse_config  # noqa: E402
from ascend_spec.vllm.releases import v1_release  # noqa: E402
from ascend_spec.vllm.v1 import runner as v1_runner  # noqa: E402

V, H = 32, 8
NPU_VLLM = fake.PAIRED_VLLM  # the vLLM release vllm-ascend 0.30.0rc2 runs with


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture
def fake_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def install(version: str = fake.SUPPORTED_VERSION) -> Path:
        fake.forget()
        root = fake.write_tree(tmp_path / f"tree_{abs(hash(version))}", version=version)
        monkeypatch.syspath_prepend(str(root))
        importlib.invalidate_caches()
        return root

    yield install
    fake.forget()


@pytest.fixture
def npu_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm, "__version__", NPU_VLLM)


@pytest.fixture
def isolated_plugin(monkeypatch: pytest.MonkeyPatch):
    """The plugin's runner_init wrapper around a light GPUModelRunner.__init__; vLLM's OOT registry restored."""
    from vllm.model_executor.custom_op import op_registry_oot

    saved_oot = dict(op_registry_oot)
    monkeypatch.setattr(gdn_setup, "_gdn_registered", False)
    monkeypatch.setattr(
        gpu_model_runner.GPUModelRunner,
        "__init__",
        v1_runner.wrap_runner_init(_light_init, v1_release("0.32.0")),
    )
    yield
    op_registry_oot.clear()
    op_registry_oot.update(saved_oot)


class RecordingDispatcher:
    """The target's dispatcher: records every call (the draft pass must not make any)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def dispatch(self, num_tokens: int, uniform_decode: bool = False, has_lora: bool = False, **_: object):
        self.calls.append(num_tokens)
        return CUDAGraphMode.NONE, BatchDescriptor(num_tokens=num_tokens)


class TinyDrafter(torch.nn.Module):
    """Even token ids embed to a long vector (peaked draft logits), odd ids to ~0 (flat logits)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        emb = torch.zeros(V, H)
        for t in range(0, V, 2):
            emb[t, t % H] = 40.0
        self.embed = torch.nn.Embedding.from_pretrained(emb)
        self.position_bias = torch.randn(k, H, generator=g) * 0.01
        self.lm_head = torch.nn.Linear(H, V, bias=False)
        self.lm_head.weight.data = torch.randn(V, H, generator=g)
        self.markov_embed = torch.nn.Embedding.from_pretrained(torch.randn(V, H, generator=g))
        self.head = torch.nn.Linear(2 * H, 1)
        self.head.weight.data = torch.randn(1, 2 * H, generator=g)

    def confidence_logits(self, hidden: torch.Tensor, markov: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([hidden, markov], dim=-1).float()).squeeze(-1)


def _light_init(self, vllm_config, device) -> None:  # noqa: ANN001 - stands for vLLM's GPUModelRunner body
    from vllm_ascend.ascend_config import init_ascend_config

    init_ascend_config(vllm_config)
    self.vllm_config = vllm_config
    self.device = device
    self.speculative_config = vllm_config.speculative_config
    self.use_aclgraph = vllm_config.use_aclgraph
    self.cudagraph_dispatcher = RecordingDispatcher()
    self.draft_model = TinyDrafter(vllm_config.speculative_config.num_speculative_tokens)


def _profile(path: Path) -> Path:
    """Target costs flat to 12 tokens then steep; a cheap drafter (so T fills the confident requests' drafts)."""
    import json

    target = CostProfile({4: 10.0, 8: 10.5, 12: 11.0, 16: 20.0, 20: 30.0}, part="target")
    draft = CostProfile({4: 1.0, 32: 1.2}, part="draft")
    data = {
        "format": "ascend-spec/plan-profile/v1",
        "label": "adapter test",
        "target": target.to_dict(),
        "drafters": {
            "dflash": {"query": "K+1", "profile": draft.to_dict()},
            "dspark": {"query": "K", "profile": draft.to_dict()},
        },
    }
    path.write_text(json.dumps(data))
    return path


def _vllm_config(
    method: str,
    *,
    k: int = 4,
    adapter: dict | None = None,
    plugin: bool = True,
    aclgraph: bool = False,
    capture_sizes: tuple[int, ...] = (),
    vllm_ascend_dynamic: str | None = None,
) -> SimpleNamespace:
    additional: dict = {}
    if plugin:
        additional["ascend_spec"] = {"gdn_verify": False, "block_slots": False, "vllm_ascend": adapter or {}}
    if vllm_ascend_dynamic is not None:
        additional["dynamic_spec_config"] = {"method": vllm_ascend_dynamic}
    return SimpleNamespace(
        additional_config=additional,
        speculative_config=SimpleNamespace(method=method, num_speculative_tokens=k, enforce_eager=False),
        scheduler_config=SimpleNamespace(max_num_seqs=8, async_scheduling=False),
        model_config=SimpleNamespace(
            is_hybrid=False, enforce_eager=not aclgraph, model="tiny-target", dtype=torch.float32
        ),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
        compilation_config=SimpleNamespace(cudagraph_capture_sizes=list(capture_sizes)),
        use_aclgraph=aclgraph,
    )


def _runner(config: SimpleNamespace):
    from vllm_ascend.worker.model_runner_v1 import NPUModelRunner

    return NPUModelRunner(config, torch.device("cpu"))


def _planned_runner(config: SimpleNamespace):
    """A runner past its first real step: the verify scheduler has the planner built from the profile file."""
    from ascend_spec.vllm.ascend.dynamic import build_planner

    runner = _runner(config)
    assert runner.drafter.dynamic_spec.planner is None  # none before the engine's first step
    runner.drafter.dynamic_spec.planner = build_planner(runner)
    return runner


def _resolve(target: str) -> object:
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(target)


# ------------------------------------------------------------------------------------------ register, gate


def test_supported_vllm_ascend_is_patched(fake_tree, npu_vllm, isolated_plugin) -> None:
    fake_tree()
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm_ascend.worker.model_runner_v1 import NPUModelRunner

    from ascend_spec.vllm.ascend.gdn import AscendSpecNPUGDNAttention
    from ascend_spec.vllm.ascend.proposers import AscendSpecNPUDflashProposer

    runner = _runner(_vllm_config("dflash"))
    assert is_npu_runner(runner)
    assert getattr(NPUModelRunner._get_drafter, "__ascend_spec_wrapped__", False)
    assert type(runner.drafter) is AscendSpecNPUDflashProposer
    assert op_registry_oot["QwenGatedDeltaNetAttention"] is AscendSpecNPUGDNAttention


@pytest.mark.parametrize(
    ("device_type", "extension_loaded", "want", "resolved"),
    [
        ("npu", True, "auto", "ascendc"),
        ("npu", False, "reference", "reference"),
        ("cpu", False, "auto", "cpu"),
    ],
)
def test_npu_layer_verifies_value_major_state_with_ascendc_where_built(
    device_type, extension_loaded, want, resolved, monkeypatch
) -> None:
    """vllm-ascend's value-major GDN state: on an NPU with the built extension the layer's "auto" resolves to the
    AscendC kernels (which take that layout: test_verify_gated_delta_rule's value-major sessions); without it the
    reference, since Triton does not compile that layout for Ascend; the emulated NPU's CPU tensors: native CPU."""
    from ascend_spec import backend as backend_mod
    from ascend_spec.vllm.ascend.gdn import npu_layer_backend

    choice = npu_layer_backend(device_type, extension_loaded)
    assert choice == want
    monkeypatch.setattr(backend_mod, "ascendc_extension_loaded", lambda: extension_loaded)
    monkeypatch.setattr(backend_mod, "host_compiler", lambda: "g++")
    # torch.device("npu") needs torch_npu; _auto_backend reads only .type
    device = types.SimpleNamespace(type=device_type)
    got = choice if choice != "auto" else backend_mod._auto_backend(device, "verify_gated_delta_rule")
    assert got == resolved


@pytest.mark.parametrize("version", ["0.30.0rc1", "0.31.0", "0.19.2.dev1637+g182b75ea8"])
def test_unsupported_vllm_ascend_is_refused_before_patching(
    fake_tree, npu_vllm, isolated_plugin, version
) -> None:
    fake_tree(version)
    from vllm_ascend.worker.model_runner_v1 import NPUModelRunner

    with pytest.raises(RuntimeError, match="installed vllm-ascend is") as err:
        _runner(_vllm_config("dflash"))
    assert repr(version) in str(err.value) and "vllm-ascend 0.30.0rc2 with vLLM 0.30.0" in str(err.value)
    assert not getattr(NPUModelRunner._get_drafter, "__ascend_spec_wrapped__", False)


def test_vllm_not_paired_with_that_vllm_ascend_is_refused(fake_tree, isolated_plugin) -> None:
    fake_tree()
    with pytest.raises(RuntimeError, match="installed vLLM is '0.32.0' with vllm-ascend '0.30.0rc2'"):
        _runner(_vllm_config("dflash"))


def test_without_vllm_ascend_the_adapter_is_inert() -> None:
    fake.forget()
    assert not vllm_ascend_importable()
    assert not is_npu_runner(object.__new__(gpu_model_runner.GPUModelRunner))
    settings = parse_config({"ascend_spec": {"vllm_ascend": {"dynamic_verify": True}}})
    assert settings is not None and settings.vllm_ascend.dynamic_verify  # checked, read by nobody here
    assert "vllm_ascend" not in sys.modules


@pytest.mark.parametrize(
    "adapter, message",
    [
        ({"dynamic_verfy": True}, r"\['vllm_ascend'\]\['dynamic_verfy'\]"),
        ({"controller_mode": "fast"}, "controller_mode"),
        ({"draft_capture_sizes": [8, 4]}, "draft_capture_sizes"),
        ({"draft_graphs": "yes"}, "draft_graphs"),
    ],
)
def test_bad_adapter_settings_name_the_key(adapter: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_config({"ascend_spec": {"vllm_ascend": adapter}})


# ------------------------------------------------------------------------------------- proposers, scheduler


@pytest.mark.parametrize("method", ["dflash", "dspark"])
def test_proposers_pass_the_runners_isinstance_checks(fake_tree, npu_vllm, isolated_plugin, method) -> None:
    fake_tree()
    from vllm_ascend.spec_decode.dflash_proposer import AscendDflashProposer
    from vllm_ascend.spec_decode.dspark_proposer import AscendDSparkProposer
    from vllm_ascend.spec_decode.utils import DynamicSpecScheduler

    runner = _runner(_vllm_config(method, adapter={"dynamic_verify": True}, vllm_ascend_dynamic=method))
    assert isinstance(runner.drafter, AscendDflashProposer)  # the runner asserted its own check already
    assert isinstance(runner.drafter, AscendDSparkProposer) == (method == "dspark")
    assert type(runner.drafter).__module__ == "ascend_spec.vllm.ascend.proposers"
    assert isinstance(runner.drafter.dynamic_spec, AscendSpecDynamicSpec)
    assert not isinstance(runner.drafter.dynamic_spec, DynamicSpecScheduler)


@torch.inference_mode()  # as the runner's execute_model
def _propose(runner, next_ids: torch.Tensor, *, uniform: bool = True) -> torch.Tensor:
    return runner.drafter._propose(
        num_speculative_tokens=runner.speculative_config.num_speculative_tokens,
        target_token_ids=next_ids,
        target_positions=None,
        target_hidden_states=None,
        next_token_ids=next_ids,
        token_indices_to_sample=None,
        common_attn_metadata=None,
        target_model_batch_desc=BatchDescriptor(num_tokens=0, uniform=uniform),
        sampling_metadata=None,
    )


def _oracle_survival(runner, next_ids: torch.Tensor, method: str) -> torch.Tensor:
    """Survival in float64 from the drafter's own tensors (softmax max / sigmoid, cumulative product)."""
    model, k = runner.draft_model, runner.speculative_config.num_speculative_tokens
    b = next_ids.shape[0]
    with torch.no_grad():
        blocks = (model.embed(next_ids)[:, None, :] + model.position_bias[None, :k, :]).reshape(b * k, H)
        if method == "dflash":
            conf = torch.softmax(model.lm_head(blocks).double(), dim=-1).amax(dim=-1).view(b, k)
        else:
            drafts = model.lm_head(blocks).argmax(-1).view(b, k)
            seeded = torch.cat([next_ids[:, None], drafts], dim=1)
            markov = model.markov_embed(seeded[:, :k]).reshape(b * k, H)
            conf = torch.sigmoid(model.confidence_logits(blocks, markov).double()).view(b, k)
    return torch.cumprod(conf, dim=1)


@pytest.mark.parametrize("backend", ["reference", "ascendc"])
@pytest.mark.parametrize("method", ["dflash", "dspark"])
def test_scheduler_lengths_are_allocate_verify_budgets_on_the_drafters_survival(
    fake_tree, npu_vllm, isolated_plugin, tmp_path: Path, method: str, backend: str
) -> None:
    fake_tree()
    profile = _profile(tmp_path / "profile.json")
    config = _vllm_config(
        method, adapter={"dynamic_verify": True, "controller_mode": "sync", "profile": str(profile)}
    )
    config.additional_config["ascend_spec"]["backend"] = backend
    runner = _planned_runner(config)
    k = runner.speculative_config.num_speculative_tokens
    next_ids = torch.tensor([2, 7, 4, 9])  # even: peaked drafts, odd: flat
    runner.input_batch.req_ids = ["a", "b", "c", "d"]
    drafts = _propose(runner, next_ids)
    runner.last_draft_token_ids = drafts

    survival = _oracle_survival(runner, next_ids, method)
    planner = runner.drafter.dynamic_spec.planner
    assert runner.drafter.dynamic_spec.backend == planner.backend == backend
    fresh = BudgetController(
        CostProfile({4: 1.0, 32: 1.2}),
        CostProfile({4: 10.0, 8: 10.5, 12: 11.0, 16: 20.0, 20: 30.0}),
        max_drafts=k,
        draft_tokens_per_request=k + 1 if method == "dflash" else k,
    )
    total = fresh.plan(survival).total_budget
    assert planner.last_plan.total_budget == total
    expected = allocate_verify_budget(survival.float(), total, backend="reference").num_drafts
    cut = runner.take_draft_token_ids()
    assert [len(d) for d in cut.draft_token_ids] == expected.tolist()
    assert cut.draft_token_ids == [drafts[i, :n].tolist() for i, n in enumerate(expected.tolist())]
    # The same lengths, by request, for the async hand-over to vLLM's scheduler.
    assert runner.drafter.dynamic_spec.published.by_request() == dict(zip("abcd", expected.tolist()))
    if method == "dflash":  # peaked requests verify their whole block, flat ones none: ragged in one batch
        assert expected.tolist() == [k, 0, k, 0]
    assert runner.drafter.dynamic_spec.host_copies == 1


def test_async_controller_one_host_copy_per_step(
    fake_tree, npu_vllm, isolated_plugin, tmp_path: Path
) -> None:
    fake_tree()
    profile = _profile(tmp_path / "profile.json")
    runner = _planned_runner(
        _vllm_config("dflash", adapter={"dynamic_verify": True, "profile": str(profile)})
    )
    spec = runner.drafter.dynamic_spec
    next_ids = torch.tensor([2, 7, 4, 9])
    for step in range(1, 4):
        _propose(runner, next_ids)
        plan = spec.planner.last_plan
        assert plan.mode == "async" and plan.allocator == "ascendc"  # the adapter splits on the NPU backend
        survival = _oracle_survival(runner, next_ids, "dflash").float()
        expected = allocate_verify_budget(survival, plan.total_budget, backend="reference").num_drafts
        assert spec.num_verify_tokens.tolist() == expected.tolist()
        assert spec.host_copies == step
        # The controller's best total rode in the lengths copy (element B) and reached its history once the
        # lengths were read: no 1-element copy of its own.
        controller = spec.planner.controller
        assert controller._pending == [] and controller.staged_total is None
        best = int(controller._device_search(survival)[1])
        assert controller.recent_totals[-1] == best and len(controller.recent_totals) == min(
            step, controller.history
        )
        assert int(spec._host[len(next_ids)]) == best


def test_a_step_with_fewer_drafts_never_verifies_the_missing_positions(
    fake_tree, npu_vllm, isolated_plugin, tmp_path: Path
) -> None:
    fake_tree()
    profile = _profile(tmp_path / "profile.json")
    config = _vllm_config(
        "dflash", adapter={"dynamic_verify": True, "controller_mode": "sync", "profile": str(profile)}
    )
    runner = _planned_runner(config)
    spec = runner.drafter.dynamic_spec
    next_ids = torch.tensor([2, 4, 6, 8])  # all peaked: a full block would be verified at K = 4
    with torch.inference_mode():
        runner.drafter._propose(
            num_speculative_tokens=2,
            target_token_ids=next_ids,
            target_positions=None,
            target_hidden_states=None,
            next_token_ids=next_ids,
            token_indices_to_sample=None,
            common_attn_metadata=None,
            target_model_batch_desc=BatchDescriptor(num_tokens=0, uniform=True),
            sampling_metadata=None,
        )
    runner.drafter.num_speculative_tokens = 4  # the runner's K for the oracle
    survival = _oracle_survival(runner, next_ids, "dflash")[:, :2]
    survival = torch.cat([survival, torch.zeros(4, 2, dtype=survival.dtype)], dim=1)
    total = spec.planner.last_plan.total_budget
    expected = allocate_verify_budget(survival.float(), total, backend="reference").num_drafts
    assert spec.num_verify_tokens.tolist() == expected.tolist()
    assert max(expected.tolist()) <= 2 and total > 0


def test_update_only_scores_finish_plans_and_copies() -> None:
    """update() runs inside the drafter's graph (device work only); finish() plans outside it."""

    class Recording:
        def __init__(self) -> None:
            self.seen: list[torch.Tensor] = []

        def plan(self, confidence: torch.Tensor) -> torch.Tensor:
            self.seen.append(confidence.clone())
            return (confidence > 0.5).sum(dim=1).to(torch.int32)

    planner = Recording()
    spec = AscendSpecDynamicSpec(
        method="dflash", planner=planner, max_batch_size=4, num_speculative_tokens=2, device="cpu"
    )
    logits = torch.tensor(
        [[9.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 9.0, 0.0], [9.0, 0.0, 0.0], [0, 0, 0], [0, 0, 0]]
    )
    spec.update(logits=logits)  # 3 rows of K = 2: a padded graph batch of 3 requests
    assert planner.seen == [] and spec.num_verify_tokens is None and spec.host_copies == 0
    spec.finish(2)
    expected = torch.softmax(logits.double(), -1).amax(-1).view(3, 2)[:2].float()
    assert torch.allclose(planner.seen[0], expected, atol=1e-6)
    assert spec.num_verify_tokens.tolist() == [1, 2] and spec.host_copies == 1
    spec.finish(2, num_drafts=0)
    assert spec.num_verify_tokens.tolist() == [0, 0] and len(planner.seen) == 1


# ------------------------------------------------------------------------------------------- draft graphs


def test_draft_graphs_use_the_drafters_sizes_whatever_the_target_step(
    fake_tree, npu_vllm, isolated_plugin
) -> None:
    fake_tree()
    from vllm_ascend.compilation import acl_graph

    k = 3  # target: 1 + K = 4 tokens per request; DFlash drafter Q = K + 1 = 4
    target_sizes = (1, 2, 4, 8, 16, 40)  # 40 tokens = 10 requests > max_num_seqs (8): no drafter graph
    runner = _runner(_vllm_config("dflash", k=k, aclgraph=True, capture_sizes=target_sizes))
    acl_graph.set_draft_graph_params(list(target_sizes))
    drafter = runner.drafter
    assert drafter.draft_graphs.sizes == (4, 8, 16)

    for size in target_sizes:  # the runner's capture loop hands the drafter the target's descriptors
        drafter.dummy_run(
            num_tokens=size,
            num_reqs=max(size // (1 + k), 1),
            aclgraph_runtime_mode=CUDAGraphMode.FULL,
            batch_descriptor=BatchDescriptor(num_tokens=size, num_reqs=size, uniform=False),
        )
    captured = set(drafter._runnable.concrete_aclgraph_entries)
    assert captured == {BatchDescriptor(num_tokens=n, num_reqs=n // 4, uniform=True) for n in (4, 8, 16)}
    params = acl_graph.get_draft_graph_params()
    assert {4, 8, 16} <= set(params.workspaces)

    assert drafter._runnable.eager_calls == 1  # the 10-request warm-up: above the drafter's graphs
    target = runner.cudagraph_dispatcher
    for uniform in (True, False):  # a uniform and a ragged target step: the same draft graph
        _propose(runner, torch.tensor([2, 7, 4]), uniform=uniform)
        assert drafter._runnable.replays[-1] == BatchDescriptor(num_tokens=16, num_reqs=4, uniform=True)
    assert runner.cudagraph_dispatcher is target and target.calls == []
    assert drafter._runnable.eager_calls == 1

    _propose(runner, torch.arange(5) * 2)  # 5 x 4 = 20 tokens, above the largest drafter graph: eager
    assert drafter._runnable.eager_calls == 2


def test_draft_capture_sizes_beyond_max_num_seqs_are_refused(fake_tree, npu_vllm, isolated_plugin) -> None:
    fake_tree()
    config = _vllm_config(
        "dflash", k=3, aclgraph=True, capture_sizes=(8,), adapter={"draft_capture_sizes": [36]}
    )
    with pytest.raises(ValueError, match=r"more requests than max_num_seqs=8 at 4 tokens each: \[36\]"):
        _runner(config)


def test_draft_capture_sizes_must_be_whole_requests(fake_tree, npu_vllm, isolated_plugin) -> None:
    fake_tree()
    config = _vllm_config(
        "dflash", k=3, aclgraph=True, capture_sizes=(8,), adapter={"draft_capture_sizes": [6]}
    )
    with pytest.raises(ValueError, match=r"multiples of the drafter's 4 tokens per request; got \[6\]"):
        _runner(config)


def test_npu_runner_is_told_by_the_module_of_its_class() -> None:
    """vllm-ascend names both of its runners NPUModelRunner: V1's hooks take one, V2's the other, and a
    subclass of either counts as it."""
    from ascend_spec.vllm.ascend import RUNNER_MODULE, V2_RUNNER_MODULE

    v1 = type("NPUModelRunner", (), {"__module__": RUNNER_MODULE})
    v2 = type("NPUModelRunner", (), {"__module__": V2_RUNNER_MODULE})
    sub = type("Mine", (v2,), {"__module__": "elsewhere"})
    assert is_npu_runner(v1()) and not is_npu_runner(v1(), V2_RUNNER_MODULE)
    assert is_npu_runner(v2(), V2_RUNNER_MODULE) and not is_npu_runner(v2())
    assert is_npu_runner(sub(), V2_RUNNER_MODULE) and not is_npu_runner(sub())


def test_prefix_caching_with_a_kv_connector_is_refused_on_vllm_ascend_in_one_line() -> None:
    """vllm-ascend's KV pool moves a cached GDN state per layer after its load; the plugin's block moves run
    before the forward: GDN verification with prefix caching and a KV transfer connector is refused on its
    runners (one line), and served without the connector, without prefix caching or without GDN verification."""
    from types import SimpleNamespace

    from ascend_spec.vllm.ascend.gdn import check_npu_gdn_engine

    def engine(mode: str, connector: object | None) -> SimpleNamespace:
        return SimpleNamespace(
            model_config=SimpleNamespace(is_hybrid=True),
            speculative_config=SimpleNamespace(method="mtp"),
            cache_config=SimpleNamespace(mamba_cache_mode=mode),
            kv_transfer_config=connector,
        )

    pool = SimpleNamespace(kv_connector="AscendStoreConnector")
    check_npu_gdn_engine(engine("align", None), True)
    check_npu_gdn_engine(engine("none", pool), True)
    check_npu_gdn_engine(engine("align", pool), False)
    with pytest.raises(ValueError) as refused:
        check_npu_gdn_engine(engine("align", pool), True)
    line = str(refused.value)
    assert "\n" not in line and "kv_transfer_config" in line and "'gdn_verify': false" in line, line
