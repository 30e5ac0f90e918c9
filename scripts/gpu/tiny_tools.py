"""The tiny multi-turn tool-use model and data (``make_tiny.py --tools``; docs/gpu-e2e.md §9).

verl 0.9.1's tool agent loop renders every turn with the tokenizer's chat template (its Continuous
Token builder for ``model_type=qwen2`` diffs renders of growing message lists, so the template must
render assistant ``tool_calls`` and ``tool`` messages and keep every prefix stable) and finds tool
calls with the ``hermes`` parser (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in
the decoded text). So the model gets Qwen2.5's tool template, written out below, and a short SFT on
whole tool-use conversations so that it writes such calls from the first rollout.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
TOOL_CONFIG = HERE.parent / "multiturn" / "gsm8k_tool_config.yaml"  # the preset's own tool config
SYSTEM = ("Solve the question. Call the `calc_gsm8k_reward` tool with your answer, "
          "then put your final answer in the format of `#### <answer>`.")

# Qwen2.5-Instruct's chat template, tool parts only (no default system text): tools listed in the
# system turn, tool calls as <tool_call> JSON, consecutive tool results in one user turn.
_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n"
    "{% endif %}# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'user' or (message.role == 'system' and not loop.first)"
    " or (message.role == 'assistant' and not message.tool_calls) %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant"
    "{% if message.content %}\n{{ message.content }}{% endif %}"
    "{% for tool_call in message.tool_calls %}"
    "{% if tool_call.function is defined %}{% set tool_call = tool_call.function %}{% endif %}"
    "\n<tool_call>\n{\"name\": \"{{ tool_call.name }}\", \"arguments\": "
    "{% if tool_call.arguments is string %}{{ tool_call.arguments }}{% else %}{{ tool_call.arguments | tojson }}{% endif %}"
    "}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}"
    "{% if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ message.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# transformers renders with trim_blocks (a newline right after a block tag is dropped): write those
# newlines as expressions, as Qwen's own template does.
QWEN25_TOOL_TEMPLATE = _TEMPLATE.replace("%}\n", "%}{{ '\\n' }}")


@functools.lru_cache(maxsize=1)
def tool_schemas() -> list[dict]:
    """The tool schemas as verl hands them to the chat template (the preset's tool config)."""
    tools = yaml.safe_load(TOOL_CONFIG.read_text())["tools"]
    return [t["tool_schema"] for t in tools]


def tool_name() -> str:
    return tool_schemas()[0]["function"]["name"]


def question_rows(split: str, n: int, seed: int) -> list[dict]:
    """Rows as scripts/prepare_data.py --dataset=gsm8k_tool writes them, on "What is a + b?"."""
    rng = random.Random(seed)
    out = []
    for idx in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        q, truth = f"What is {a} + {b}?", str(a + b)
        out.append({
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {"split": split, "index": idx, "question": q, "answer": f"{a} + {b} = {truth}\n#### {truth}",
                           "need_tools_kwargs": True,
                           "tools_kwargs": {tool_name(): {"create_kwargs": {"ground_truth": truth}}}},
        })
    return out


def conversation(a: int, b: int, guess: int) -> list[dict]:
    """One whole tool-use episode: a call with ``guess``, the tool's reply, the final answer."""
    truth = a + b
    reward = 1.0 if guess == truth else 0.0
    # the reply's wording is scripts/multiturn/gsm8k_tool.py's reply() (not imported: it needs verl)
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"What is {a} + {b}?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": tool_name(), "arguments": {"answer": str(guess)}}}]},
        {"role": "tool", "content": f"Current parsed answer={str(guess)!r} reward={reward}"},
        {"role": "assistant", "content": f"#### {truth if reward else guess}"},
    ]


def episodes(tok, n: int, seed: int) -> list[str]:
    """Rendered episodes; the guess is right about half the time, so the format is what is learned."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        guess = a + b if rng.random() < 0.5 else rng.randint(0, 18)
        out.append(tok.apply_chat_template(conversation(a, b, guess), tools=tool_schemas(), tokenize=False))
    return out


def train_tokenizer(d: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    draft = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), eos_token="<|im_end|>")
    draft.chat_template = QWEN25_TOOL_TEMPLATE
    text = episodes(draft, 400, seed=1)
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=768, special_tokens=specials,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    ftok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None)
    ftok.chat_template = QWEN25_TOOL_TEMPLATE
    ftok.save_pretrained(d)
    return ftok


def sft(model, tok, steps: int, device: str, batch_size: int = 64) -> float:
    """Teach the episode format (plain LM loss on whole episodes, pads masked); returns the last loss."""
    import torch

    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # decayed to 0: at a constant 3e-3 the loss still jumped between 0.2 and 0.4 late in the run
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1 - i / steps)
    loss = torch.tensor(0.0)
    for step in range(steps):
        batch = tok(episodes(tok, batch_size, seed=1000 + step), return_tensors="pt", padding=True)
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        labels = ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    return float(loss.detach())


def make_tool_model(root: Path, steps: int = 400, batch_size: int = 64) -> None:
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    d = root / "models" / "tiny-qwen2-tools"
    d.mkdir(parents=True, exist_ok=True)
    trained = train_tokenizer(d)
    cfg = Qwen2Config(vocab_size=len(trained), hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=True, eos_token_id=trained.eos_token_id, pad_token_id=trained.pad_token_id,
                      bos_token_id=trained.eos_token_id, torch_dtype="bfloat16")
    # Taught with the tokenizer verl and vLLM will load: AutoTokenizer on the finished model dir.
    # Once config.json says qwen2 it builds a Qwen2Tokenizer from our vocab and merges, with Qwen2's
    # own pre-tokenizer, and encodes the same text into other ids than the tokenizer as trained
    # (268 tokens for a prompt of 265): the first SFT, done with the latter, taught the model a
    # token stream the rollout never showed it (docs/gpu-e2e.md §9).
    cfg.save_pretrained(d)
    tok = AutoTokenizer.from_pretrained(d)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    loss = sft(model, tok, steps, device, batch_size)
    model.to("cpu").to(torch.bfloat16).save_pretrained(d)
    print("model", d, "vocab", len(tok), f"sft loss {loss:.3f}", flush=True)
    print("model check:", check_model(d, device), flush=True)


def check_model(d: Path, device: str, n: int = 16) -> str:
    """What the saved model writes first, loaded from disk as the rollout loads it: how many of ``n``
    sampled first turns (temperature 1, the test rows' prompts with the tools) hold a tool call
    that verl's hermes parser would accept (``<tool_call>{json with name, arguments}</tool_call>``)."""
    import re

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(device).eval()
    calls, text, prompt_len = 0, "", 0
    for row in question_rows("test", n, 1):
        enc = tok.apply_chat_template(row["prompt"], tools=tool_schemas(), add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)
        ids = enc["input_ids"].to(device)
        prompt_len = ids.shape[1]
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                                 max_new_tokens=64, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        text = tok.decode(out[0][prompt_len:])
        found = re.search(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL)
        try:
            call = json.loads(found.group(1)) if found else {}
            calls += bool(call.get("name")) and "arguments" in call
        except ValueError:
            pass
    return f"{calls}/{n} sampled first turns hold a tool call (prompt {prompt_len} tokens); the last: {text[:160]!r}"


if __name__ == "__main__":  # a look at one rendered episode
    print(json.dumps(tool_schemas()))
