#!/usr/bin/env python3
"""make_tiny_fixtures.py OUT_DIR — tiny random-weight checkpoints + reference logits.

Writes OUT_DIR/{qwen3,qwen2,llama3}/ in the Hugging Face layout (config.json,
model.safetensors) and reference.json: a fixed 40-token prompt and
transformers' float32 logits for every prompt position. kestrel's
tests/unit/test_tiny_models.c checks its forward against them (1e-4 relative).

Runs where torch and transformers are installed (the H200 machine has both;
tested with torch 2.11, transformers 5.17). The three models cover the
architecture variants and the three weight dtypes:
  qwen3  - QK-norm, tied embeddings, bf16 weights, rope_parameters layout
  qwen2  - q/k/v bias, separate lm_head, f16 weights
  llama3 - Llama 3 rope scaling (llama3 type), f32 weights, config rewritten to
           the older top-level rope_theta + rope_scaling layout
Every file stays far under 1 MB.
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

SEED = 1234
VOCAB = 256
PROMPT_LEN = 40

COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)

SPECS = {
    "qwen3": dict(model_type="qwen3", dtype=torch.bfloat16, extra=dict(head_dim=16, tie_word_embeddings=True),
                  rope={"rope_type": "default", "rope_theta": 1000000.0}),
    "qwen2": dict(model_type="qwen2", dtype=torch.float16, extra=dict(tie_word_embeddings=False),
                  rope={"rope_type": "default", "rope_theta": 10000.0}),
    "llama3": dict(model_type="llama", dtype=torch.float32, extra=dict(tie_word_embeddings=False),
                   rope={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
}


def make_config(spec):
    kw = dict(COMMON, **spec["extra"])
    try:  # transformers >= 5
        return AutoConfig.for_model(spec["model_type"], rope_parameters=dict(spec["rope"]), **kw)
    except TypeError:
        rope = dict(spec["rope"])
        theta = rope.pop("rope_theta")
        scaling = rope if rope.get("rope_type") != "default" else None
        return AutoConfig.for_model(spec["model_type"], rope_theta=theta, rope_scaling=scaling, **kw)


def randomize(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=gen))


def to_old_rope_layout(path):
    with open(path) as f:
        cfg = json.load(f)
    rp = cfg.pop("rope_parameters", None)
    if rp is not None:
        cfg["rope_theta"] = rp.pop("rope_theta")
        cfg["rope_scaling"] = rp if rp.get("rope_type") not in (None, "default") else None
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def main():
    out = sys.argv[1]
    gen = torch.Generator().manual_seed(SEED)
    prompt = torch.randint(3, VOCAB, (PROMPT_LEN,), generator=gen).tolist()
    for name, spec in SPECS.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        cfg = make_config(spec)
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
        randomize(model, gen)
        model.to(spec["dtype"]).save_pretrained(d, safe_serialization=True)
        for extra in ("generation_config.json",):
            p = os.path.join(d, extra)
            if os.path.exists(p):
                os.remove(p)
        if name == "llama3":
            to_old_rope_layout(os.path.join(d, "config.json"))
        # reference: float32 compute from the saved (rounded) weights
        ref = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
        ref.eval()
        with torch.no_grad():
            logits = ref(torch.tensor([prompt])).logits[0].float()
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({"generator": "tools/make_tiny_fixtures.py", "transformers": transformers.__version__,
                       "torch": torch.__version__, "weights_dtype": str(spec["dtype"]),
                       "prompt_ids": prompt,
                       "logits": [[float("%.7g" % v) for v in row] for row in logits.tolist()]}, f)
        print(name, "ok", os.path.getsize(os.path.join(d, "model.safetensors")), "bytes of weights")


if __name__ == "__main__":
    main()
