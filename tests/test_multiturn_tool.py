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
