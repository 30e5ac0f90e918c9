"""The GSM8K tool rayjobs ships (scripts/multiturn/) loads and runs as verl 0.9.1's agent loop does it.

It runs in a subprocess as on a cluster node: cwd and PYTHONPATH = the job's working_dir (rayjobs'
scripts/), verl's own ``resolve_config_path`` and ``load_all_tools`` on the preset's relative
``tool_config_path``, then ``create(create_kwargs=...)`` / ``execute`` / ``release`` per call, the
way ``ToolAgentLoop._call_tool`` calls a ``BaseTool``. Needs verl importable (torch and its deps).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rayjobs.preflight import verlcheck

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
PROBE = r"""
import asyncio, contextlib, io, json
from verl.tools.tool_registry import load_all_tools
from verl.utils.import_utils import resolve_config_path

with contextlib.redirect_stdout(io.StringIO()):  # BaseTool prints its schema
    tools = load_all_tools(resolve_config_path("multiturn/gsm8k_tool_config.yaml"), None)

async def call(tool, args, kwargs):
    iid, _ = await tool.create(create_kwargs=kwargs)
    try:
        resp, reward, metrics = await tool.execute(iid, args, agent_data=None)
        return [resp.text, reward, await tool.calc_reward(iid), metrics]
    finally:
        await tool.release(iid)

async def main():
    t = tools[0]
    calls = [({"answer": "72"}, {"ground_truth": "72"}), ({"answer": "#### 72"}, {"ground_truth": "72"}),
             ({"answer": "71"}, {"ground_truth": "72"}), ({}, {"ground_truth": "72"}), ({"answer": "72"}, {})]
    out = [await call(t, a, k) for a, k in calls]
    return {"cls": f"{type(t).__module__}.{type(t).__name__}", "name": t.name, "left": len(t._state), "calls": out}

print(json.dumps(asyncio.run(main())))
"""


@pytest.mark.skipif(bool(verlcheck.missing_modules()), reason="loading a verl tool needs torch, tensordict, transformers")
def test_shipped_tool_loads_and_scores_as_verls_agent_loop_calls_it():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(SCRIPTS)  # as Ray sets it for the job's working_dir
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=SCRIPTS, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["cls"] == "multiturn.gsm8k_tool.Gsm8kTool" and got["name"] == "calc_gsm8k_reward"
    assert got["left"] == 0  # release forgets every instance
    assert [c[1:3] for c in got["calls"]] == [[0.0, 1.0], [0.0, 1.0], [-0.05, 0.0], [-0.05, 0.0], [-0.05, 0.0]]
    assert got["calls"][0][0] == "Current parsed answer='72' reward=1.0"
    # the reply never carries '#### N', which verl's strict outcome reward would read as the final answer
    assert all("####" not in c[0] for c in got["calls"])


def test_tiny_multiturn_preset_is_the_tool_preset_at_the_tiny_size(monkeypatch, tmp_path):
    """+exp=gpu_tiny_multiturn (the GPU machine's run, docs/gpu-e2e.md §9): gsm8k_multiturn_tools'
    multi-turn keys and working_dir, gpu_tiny_grpo's sizes, the tiny tool model and data, and paths
    that resolve inside the job's working_dir (rayjobs' scripts/) as on every node."""
    from omegaconf import OmegaConf

    from rayjobs.config import compose

    monkeypatch.setenv("RAYJOBS_STORAGE", "/shared/rayjobs")
    monkeypatch.chdir(tmp_path)  # no user presets
    cfg = compose.compose(["+exp=gpu_tiny_multiturn"]).cfg
    c = OmegaConf.to_container(cfg, resolve=True)
    rollout = c["actor_rollout_ref"]["rollout"]
    assert rollout["multi_turn"]["enable"] and rollout["multi_turn"]["format"] == "hermes"
    assert rollout["agent"]["default_agent_loop"] == "tool_agent" and rollout["mode"] == "async"
    assert (rollout["gpu_memory_utilization"], rollout["n"], c["trainer"]["n_gpus_per_node"]) == (0.2, 8, 1)
    assert c["data"]["train_batch_size"] == 32 and c["data"]["return_raw_chat"]
    assert c["actor_rollout_ref"]["model"]["path"] == "/shared/rayjobs/models/tiny-qwen2-tools"
    assert c["data"]["train_files"] == "/shared/rayjobs/data/arith_tool/train.parquet"
    workdir = Path(c["rayjobs"]["working_dir"])
    assert workdir == SCRIPTS
    assert (workdir / rollout["multi_turn"]["tool_config_path"]).is_file()
    assert (workdir / c["reward"]["custom_reward_function"]["path"]).is_file()
    # room for the rendered prompt (the tool schema in the system turn) and a whole episode
    assert c["data"]["max_prompt_length"] >= 280 and rollout["max_model_len"] >= c["data"]["max_prompt_length"] + c["data"]["max_response_length"]


@pytest.mark.skipif(bool(verlcheck.missing_modules()), reason="verl's token builder and tool parser need torch, transformers")
def test_tiny_tool_template_renders_as_verls_agent_loop_needs(tmp_path):
    """The tiny tool model's tokenizer (scripts/gpu/tiny_tools.py, no SFT here): verl 0.9.1's
    Continuous Token builder for qwen2 renders the prompt with the tools and merges a tool call and
    the tool's reply turn; the hermes parser reads the call back, as ToolAgentLoop does."""
    import asyncio

    sys.path.insert(0, str(SCRIPTS / "gpu"))
    try:
        import tiny_tools
    finally:
        sys.path.remove(str(SCRIPTS / "gpu"))
    from verl.experimental.agent_loop.tool_parser import ToolParser
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from transformers import AutoTokenizer, Qwen2Config

    tiny_tools.train_tokenizer(tmp_path)
    Qwen2Config(vocab_size=600).save_pretrained(tmp_path)  # as the finished model dir: model_type qwen2
    tok = AutoTokenizer.from_pretrained(tmp_path)  # what verl and vLLM load (a Qwen2Tokenizer then)
    rows = tiny_tools.question_rows("train", 4, 0)
    assert rows[0]["extra_info"]["tools_kwargs"]["calc_gsm8k_reward"]["create_kwargs"]["ground_truth"] == \
        rows[0]["reward_model"]["ground_truth"]
    builder = create_continuous_token_builder(tok, hf_model_type="qwen2")
    tools = tiny_tools.tool_schemas()
    prompt = builder.build_initial_tokens(rows[0]["prompt"], tools=tools)
    text = tok.decode(prompt)
    assert "<tools>\n{" in text and '"calc_gsm8k_reward"' in text and text.endswith("<|im_start|>assistant\n")
    call = '<tool_call>\n{"name": "calc_gsm8k_reward", "arguments": {"answer": "7"}}\n</tool_call>'
    gen = tok.encode(call, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
    merged = builder.merge_assistant_tokens(prompt, gen)
    content, calls = asyncio.run(ToolParser.get_tool_parser("hermes", tok).extract_tool_calls(gen, tools))
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("calc_gsm8k_reward", {"answer": "7"})]
    before = list(rows[0]["prompt"]) + [{"role": "assistant", "content": content}]
    after = before + [{"role": "tool", "content": "Current parsed answer='7' reward=1.0"}]
    turn = builder.merge_context_tokens(before, after, merged.token_ids, tools=tools)
    assert tok.decode(turn.token_ids[len(merged.token_ids):]) == (
        "\n<|im_start|>user\n<tool_response>\nCurrent parsed answer='7' reward=1.0\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")
    # the SFT episodes are the same rendering, whole, and their tokens start with the prompt's
    episode = tiny_tools.episodes(tok, 1, 3)[0]
    conv = tiny_tools.conversation(2, 5, 7)
    whole = tok(tok.apply_chat_template(conv, tools=tools, tokenize=False))["input_ids"]
    assert whole[:len(first := builder.build_initial_tokens(conv[:2], tools=tools))] == first
    assert episode.count('<tool_call>\n{"name": "calc_gsm8k_reward"') == 1 and "<tool_response>" in episode
    assert episode.rstrip().endswith("<|im_end|>") and "<|im_start|>assistant\n####" in episode
