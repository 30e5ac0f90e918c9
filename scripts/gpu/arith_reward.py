"""Reward for the synthetic arithmetic task of scripts/gpu/make_tiny.py (verl custom reward file).

verl's built-in gsm8k reward (data_source=openai/gsm8k) gives 1.0 for a correct ``#### N`` and 0
otherwise; a random-initialised model almost never earns it, so GRPO sees no signal for a long
time. This keeps the gsm8k rule for the answer and adds small format credit so the reward can rise
from the first steps of a tiny run:

* 1.0  the last ``#### N`` equals the ground truth (exactly verl's gsm8k ``strict`` rule);
* 0.2  a ``#### N`` is there but N is wrong;
* 0.1  ``####`` appears without a number;
* 0.0  otherwise.

verl 0.9.1 signature: ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``,
selected with ``reward.custom_reward_function.path=scripts/gpu/arith_reward.py`` (relative to the
job's working_dir, which is the repository).
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    text = solution_str[-300:]
    found = _ANSWER.findall(text)
    if found:
        answer = found[-1].replace(",", "").replace("$", "")
        return 1.0 if answer == str(ground_truth) else 0.2
    return 0.1 if "####" in text else 0.0
