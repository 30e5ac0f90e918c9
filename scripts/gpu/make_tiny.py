"""Make, on the GPU machine (nothing can be downloaded there), what the tiny GRPO run needs:

* a random-initialised Qwen2-shaped causal LM (4 layers, hidden 256) in ``OUT/models/tiny-qwen2``,
  with a byte-level BPE tokenizer trained here on the task's own text (vocab 512) and a
  Qwen-style chat template;
* a synthetic arithmetic task in verl's parquet schema (the same rows as scripts/prepare_data.py
  writes for GSM8K), in ``OUT/data/arith/{train,test}.parquet``: "What is 3 + 4? ... output the
  final answer after "####"." with ``data_source=openai/gsm8k`` and the bare number as ground
  truth, so verl's built-in gsm8k reward scores it (1.0 for a correct "#### N", else 0).

The model starts random, so the reward starts near 0 and can only rise once it learns to emit
"#### <digits>"; small operands (0..9) keep the answer space tiny.

With ``--tools`` it also makes what the tiny multi-turn tool-use run (``+exp=gpu_tiny_multiturn``)
needs, beside the above:

* ``OUT/models/tiny-qwen2-tools``: the same shape, with Qwen2.5's tool-use chat template (the
  tools in the system prompt, ``<tool_call>{json}</tool_call>`` from the assistant, the tool's
  answer as ``<tool_response>`` in a user turn) and a tokenizer trained on such conversations. A
  random model would never write a tool call, so it is taught the *format* first by a short SFT
  (a few hundred steps, seconds on a GPU): call ``calc_gsm8k_reward`` with an answer, read the
  tool's reply, end with ``#### N``. Its answers are mostly wrong, so RL still has work to do.
* ``OUT/data/arith_tool/{train,test}.parquet``: the arithmetic rows in the layout of
  ``scripts/prepare_data.py --dataset=gsm8k_tool`` (a system prompt asking for the tool,
  ``extra_info.need_tools_kwargs`` and ``tools_kwargs.calc_gsm8k_reward.create_kwargs.ground_truth``).

    python3 scripts/gpu/make_tiny.py OUT [--tools]   # OUT = the rayjobs storage root, e.g. $RAYJOBS_HOME/storage
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def rows(split: str, n: int, seed: int, hi: int = 9) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for idx in range(n):
        a, b = rng.randint(0, hi), rng.randint(0, hi)
        q = f"What is {a} + {b}?"
        out.append({
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": q + " " + INSTRUCTION}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"split": split, "index": idx, "answer": f"{a} + {b} = {a + b}\n#### {a + b}", "question": q},
        })
    return out


def make_data(root: Path, name: str = "arith", make_rows=rows) -> None:
    """``root/data/<name>/{train,test}.parquet`` (2048 and 64 rows) from ``make_rows(split, n, seed)``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = root / "data" / name
    d.mkdir(parents=True, exist_ok=True)
    for split, n, seed in (("train", 2048, 0), ("test", 64, 1)):
        pq.write_table(pa.Table.from_pylist(make_rows(split, n, seed)), d / f"{split}.parquet")
    print("data", d, flush=True)


def make_model(root: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    d = root / "models" / "tiny-qwen2"
    d.mkdir(parents=True, exist_ok=True)
    text = [f"<|im_start|>user\nWhat is {a} + {b}? {INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n"
            f"{a} + {b} = {a + b}\n#### {a + b}<|im_end|>" for a in range(20) for b in range(20)]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    ftok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None)
    ftok.chat_template = CHAT_TEMPLATE
    ftok.save_pretrained(d)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(ftok), hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=True, eos_token_id=ftok.eos_token_id, pad_token_id=ftok.pad_token_id,
                      bos_token_id=ftok.eos_token_id, torch_dtype="bfloat16")
    Qwen2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d)
    print("model", d, "vocab", len(ftok), flush=True)


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = Path(args[0] if args else ".").resolve()
    t0 = time.time()
    make_data(root)
    make_model(root)
    if "--tools" in sys.argv:
        from tiny_tools import make_tool_model, question_rows  # beside this file

        make_data(root, "arith_tool", question_rows)
        make_tool_model(root)
    print(f"made in {time.time() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
