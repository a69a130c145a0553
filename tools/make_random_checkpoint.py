#!/usr/bin/env python3
"""make_random_checkpoint.py SHAPE OUT_DIR [--tokenizer-from DIR] — a random-weight
checkpoint of a real model's shape in the Hugging Face layout (config.json,
generation_config.json, sharded model-0000N-of-0000M.safetensors + index, bf16),
for measuring speed at real sizes: decode speed does not depend on the values.

SHAPE: qwen3-8b (hidden 4096, 36 layers, 32/8 heads, head_dim 128, intermediate
12288, vocab 151936), qwen3-1.7b (2048, 28, 16/8, 128, 6144, 151936, tied),
llama3.1-8b (4096, 32, 32/8, 128, 14336, 128256, llama3 rope scaling).
Runs where torch and safetensors are installed (the H200 machine); weights are
drawn on the GPU when there is one. --tokenizer-from copies tokenizer.json /
tokenizer_config.json from a model directory (e.g. tinycoder's: its ids are a
subset of these vocabularies, so `kestrel run` can drive the checkpoint).
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file

SHAPES = {
    "qwen3-8b": dict(arch="Qwen3ForCausalLM", model_type="qwen3", hidden=4096, layers=36, heads=32, kv=8, head_dim=128,
                     inter=12288, vocab=151936, tie=False, theta=1000000.0, qk_norm=True),
    "qwen3-1.7b": dict(arch="Qwen3ForCausalLM", model_type="qwen3", hidden=2048, layers=28, heads=16, kv=8, head_dim=128,
                       inter=6144, vocab=151936, tie=True, theta=1000000.0, qk_norm=True),
    "llama3.1-8b": dict(arch="LlamaForCausalLM", model_type="llama", hidden=4096, layers=32, heads=32, kv=8, head_dim=128,
                        inter=14336, vocab=128256, tie=False, theta=500000.0, qk_norm=False),
}
SHARD_BYTES = 4 << 30


def main():
    shape, out = sys.argv[1], sys.argv[2]
    tok_from = sys.argv[sys.argv.index("--tokenizer-from") + 1] if "--tokenizer-from" in sys.argv else None
    s = SHAPES[shape]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)
    os.makedirs(out, exist_ok=True)
    H, hd = s["hidden"], s["head_dim"]

    def rnd(*shape_, scale=0.02):
        return (torch.randn(*shape_, generator=g, device=dev, dtype=torch.float32) * scale).to(torch.bfloat16).cpu()

    def ones(n):
        return (1.0 + 0.1 * torch.randn(n, generator=g, device=dev)).to(torch.bfloat16).cpu()

    tensors = {"model.embed_tokens.weight": rnd(s["vocab"], H), "model.norm.weight": ones(H)}
    if not s["tie"]:
        tensors["lm_head.weight"] = rnd(s["vocab"], H)
    for l in range(s["layers"]):
        p = f"model.layers.{l}."
        tensors[p + "input_layernorm.weight"] = ones(H)
        tensors[p + "post_attention_layernorm.weight"] = ones(H)
        tensors[p + "self_attn.q_proj.weight"] = rnd(s["heads"] * hd, H)
        tensors[p + "self_attn.k_proj.weight"] = rnd(s["kv"] * hd, H)
        tensors[p + "self_attn.v_proj.weight"] = rnd(s["kv"] * hd, H)
        tensors[p + "self_attn.o_proj.weight"] = rnd(H, s["heads"] * hd)
        if s["qk_norm"]:
            tensors[p + "self_attn.q_norm.weight"] = ones(hd)
            tensors[p + "self_attn.k_norm.weight"] = ones(hd)
        tensors[p + "mlp.gate_proj.weight"] = rnd(s["inter"], H)
        tensors[p + "mlp.up_proj.weight"] = rnd(s["inter"], H)
        tensors[p + "mlp.down_proj.weight"] = rnd(H, s["inter"])
    # shard
    shards, cur, cur_bytes = [], {}, 0
    for k, v in tensors.items():
        nb = v.numel() * v.element_size()
        if cur and cur_bytes + nb > SHARD_BYTES:
            shards.append(cur)
            cur, cur_bytes = {}, 0
        cur[k] = v
        cur_bytes += nb
    shards.append(cur)
    weight_map, total = {}, 0
    for i, sh in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(sh, os.path.join(out, name), metadata={"format": "pt"})
        for k, v in sh.items():
            weight_map[k] = name
            total += v.numel() * v.element_size()
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
    cfg = {"architectures": [s["arch"]], "model_type": s["model_type"], "hidden_size": H,
           "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"], "num_key_value_heads": s["kv"],
           "head_dim": hd, "intermediate_size": s["inter"], "vocab_size": s["vocab"], "rms_norm_eps": 1e-6,
           "max_position_embeddings": 131072 if s["model_type"] == "llama" else 40960,
           "tie_word_embeddings": s["tie"], "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
           "rope_theta": s["theta"]}
    if s["model_type"] == "llama":
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192}
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    json.dump({"do_sample": False, "eos_token_id": [2]}, open(os.path.join(out, "generation_config.json"), "w"))
    if tok_from:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.exists(os.path.join(tok_from, f)):
                shutil.copy(os.path.join(tok_from, f), os.path.join(out, f))
    print(f"{shape}: {total / 1e9:.2f} GB of bf16 weights in {len(shards)} shards -> {out}")


if __name__ == "__main__":
    main()
