"""``calc_gsm8k_reward``: a verl ``BaseTool`` that scores the model's GSM8K answer against the row's truth.

verl 0.9.1 ships no tool implementations (its ``verl.tools.gsm8k_tool`` was removed before 0.8,
verl#6302: "it's up to users to implement their own tools"), so ``+exp=gsm8k_multiturn_tools``
brings this one, written against verl 0.9.1's ``verl.tools.base_tool.BaseTool`` API. It behaves as
the tool of verl's old multi-turn GSM8K example, with one deliberate difference (see ``reply``).

How verl uses it (``ToolAgentLoop._call_tool``, verl 0.9.1): for *every* tool call of a
trajectory it runs ``create(create_kwargs=row.tools_kwargs["calc_gsm8k_reward"]["create_kwargs"])``,
then ``execute(instance_id, parsed_arguments)``, then ``release(instance_id)``. The ground truth
therefore arrives per call from the data (``extra_info.tools_kwargs``, written by
``scripts/prepare_data.py --dataset=gsm8k_tool``). The tool's reward only lands in the rollout's
extra fields (``tool_rewards``); the training reward is verl's gsm8k rule on the final response.

Named on the cluster as ``multiturn.gsm8k_tool.Gsm8kTool`` (``multiturn/gsm8k_tool_config.yaml``).
"""

from __future__ import annotations

from typing import Any, Optional
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.reward_score import gsm8k
from verl.utils.rollout_trace import rollout_trace_op

#: Added to the tool's reply when the answer was wrong (the old example's "no improvement" penalty;
#: with one create/execute/release per call in verl 0.9.1, "no improvement" means "not correct").
WRONG_PENALTY = -0.05


def as_gsm8k_answer(raw: Any) -> str:
    """The model's ``answer`` argument as the ``#### N`` text verl's gsm8k scorer reads."""
    text = str(raw if raw is not None else "").strip()
    return text if text.startswith("####") else f"#### {text}"


def reply(answer: str, reward: float) -> str:
    """What the model sees back. The answer is echoed WITHOUT its ``####`` marker: the outcome
    reward reads the decoded response, tool turns included, with a strict ``#### N`` rule, so an
    echoed ``#### 72`` would count as the model's own final answer (the old example echoed it)."""
    shown = answer.removeprefix("####").strip()
    return f"Current parsed answer={shown!r} reward={reward}"


class Gsm8kTool(BaseTool):
    """Checks a GSM8K answer: reward 1.0 if it parses to the ground truth, else 0.0."""

    def __init__(self, config: dict, tool_schema: Optional[OpenAIFunctionToolSchema]) -> None:
        super().__init__(config, tool_schema)
        self._state: dict[str, dict[str, Any]] = {}  # instance id -> ground truth, last answer, reward

    async def create(self, instance_id: Optional[str] = None, ground_truth: Optional[str] = None,
                     **kwargs: Any) -> tuple[str, ToolResponse]:
        """Start an instance; the ground truth comes as an argument or in ``create_kwargs`` (verl's way)."""
        instance_id = instance_id or str(uuid4())
        if ground_truth is None:
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        self._state[instance_id] = {"ground_truth": ground_truth, "answer": "", "reward": 0.0}
        return instance_id, ToolResponse()

    @rollout_trace_op
    async def execute(self, instance_id: str, parameters: dict[str, Any],
                      **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        """Score ``parameters["answer"]``; returns (reply, tool reward, metrics)."""
        state = self._state[instance_id]
        state["answer"] = as_gsm8k_answer(parameters.get("answer"))
        reward = await self.calc_reward(instance_id)
        tool_reward = 0.0 if reward > state["reward"] else WRONG_PENALTY
        state["reward"] = max(state["reward"], reward)
        return ToolResponse(text=reply(state["answer"], reward)), tool_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """verl's gsm8k score of the last answer (flexible parse: the last number counts)."""
        state = self._state[instance_id]
        if state["ground_truth"] is None:  # no tools_kwargs for this row: nothing to compare with
            return 0.0
        return float(gsm8k.compute_score(state["answer"], str(state["ground_truth"]), method="flexible",
                                         format_score=0.0, score=1.0))

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forget the instance."""
        self._state.pop(instance_id, None)
