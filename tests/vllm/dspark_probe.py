"""One DSpark engine run (in a child process) that records what the V1 DSpark proposer saw and produced.

Per proposal: the anchors, the drafter's input ids / positions / output hidden states, the drafted tokens and
``last_confidences()``; plus the greedy tokens per prompt, the acceptance counters and the drafter's class.
Run as ``python dspark_probe.py request.json result.pt`` (tests/vllm/test_vllm_dspark.py builds the request).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch


def _install_recorder(worker) -> str:  # noqa: ANN001 - runs inside the worker
    drafter = worker.model_runner.drafter
    records: list[dict] = []
    state = {"in_propose": False}
    propose = drafter.propose

    def recording_propose(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        state["in_propose"] = True
        try:
            drafts = propose(*args, **kwargs)
        finally:
            state["in_propose"] = False
        conf = drafter.last_confidences()
        records[-1].update(
            anchors=kwargs["next_token_ids"][: drafts.shape[0]].cpu().clone(),
            drafts=drafts.cpu().clone(),
            confidences=None if conf is None else conf.cpu().clone(),
        )
        return drafts

    def hook(module, args, kwargs, output):  # noqa: ANN001, ANN202
        if state["in_propose"]:
            records.append(
                dict(
                    input_ids=kwargs["input_ids"].cpu().clone(),
                    positions=kwargs["positions"].cpu().clone(),
                    hidden=output.float().cpu().clone(),
                )
            )

    drafter.propose = recording_propose
    drafter.model.register_forward_hook(hook, with_kwargs=True)
    worker._dspark_records = records
    return type(drafter).__name__


def _take_records(worker) -> list[dict]:  # noqa: ANN001
    return worker._dspark_records


def main(request: str, result: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from ascend_spec.e2e.engine import EngineSpec, _metric_values

    data = json.loads(Path(request).read_text())
    spec = data["spec"]
    spec["target"] = Path(spec["target"])
    llm = LLM(**EngineSpec(**spec).engine_kwargs())
    drafter_class = llm.collective_rpc(_install_recorder)[0]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in data["max_tokens"]]
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in data["prompts"]], params, use_tqdm=False)
    metrics = _metric_values(llm)
    torch.save(
        dict(
            drafter_class=drafter_class,
            tokens=[list(o.outputs[0].token_ids) for o in outs],
            records=llm.collective_rpc(_take_records)[0],
            num_drafts=int(metrics.get("vllm:spec_decode_num_drafts", 0)),
            num_accepted=int(metrics.get("vllm:spec_decode_num_accepted_tokens", 0)),
        ),
        result,
    )
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
