#!/usr/bin/env python3
"""make_mtp_reference.py MODEL_DIR OUT.json — an independent reference for
tinycoder's native MTP head (Qwen3-Next naming, definition in
shared/models/README.md), computed with torch + transformers in float32:

  target: Qwen3ForCausalLM; h_p = its final hidden state at p (after the final
  norm: output_hidden_states[-1]); t_n = its greedy next token.
  MTP entry at position p+1 (for p = 0..n-1): x = fc([RMSNorm_e(embed(t_{p+1}));
  RMSNorm_h(h_p)]), then the MTP decoder layer (a Qwen3DecoderLayer with the
  mtp.layers.0.* weights) at position p+1, causal over the MTP entries,
  logits = lm_head(mtp.norm(x)). The last entry's top-1 is the draft for
  t_{n+1}; depth 2 feeds mtp.norm(x) back as h with that draft as the token.

Writes the prompt ids, t_n, the depth-1 draft's top-5 ids and logits, the
depth-1 top-1 at every prompt position (teacher-forced), and the depth-2
top-1. Runs where torch and transformers are installed (the H200 machine).
"""
import json
import sys

import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RMSNorm


def main():
    d, out = sys.argv[1], sys.argv[2]
    ref = json.load(open(f"{d}/reference/greedy.json"))
    ids = ref["cases"][0]["prompt_ids"]
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    cfg = model.config
    mtp = {}
    idx = json.load(open(f"{d}/model.safetensors.index.json"))["weight_map"]
    for name, shard in idx.items():
        if name.startswith("mtp."):
            with safe_open(f"{d}/{shard}", "pt") as f:
                mtp[name[4:]] = f.get_tensor(name).float()
    H = cfg.hidden_size
    norm_e = Qwen3RMSNorm(H, eps=cfg.rms_norm_eps); norm_e.weight.data = mtp["pre_fc_norm_embedding.weight"]
    norm_h = Qwen3RMSNorm(H, eps=cfg.rms_norm_eps); norm_h.weight.data = mtp["pre_fc_norm_hidden.weight"]
    norm_o = Qwen3RMSNorm(H, eps=cfg.rms_norm_eps); norm_o.weight.data = mtp["norm.weight"]
    fc = torch.nn.Linear(2 * H, H, bias=False); fc.weight.data = mtp["fc.weight"]
    layer = Qwen3DecoderLayer(cfg, layer_idx=0)
    layer.load_state_dict({k[len("layers.0."):]: v for k, v in mtp.items() if k.startswith("layers.0.")})
    layer.eval()
    rot = model.model.rotary_emb
    embed = model.model.embed_tokens
    with torch.no_grad():
        o = model(torch.tensor([ids]), output_hidden_states=True)
        h = o.hidden_states[-1][0]                      # (n, H), after the final norm
        t_n = int(o.logits[0, -1].argmax())
        nxt = ids[1:] + [t_n]                           # t_{p+1} for p = 0..n-1

        def mtp_pass(tokens, hid, positions):
            x = fc(torch.cat([norm_e(embed(torch.tensor(tokens))), norm_h(hid)], dim=-1))[None]
            L = x.shape[1]
            mask = torch.full((L, L), float("-inf")).triu(1)[None, None]
            pos = torch.tensor([positions])
            pe = rot(x, pos)
            y = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=pe)
            y = y[0] if isinstance(y, tuple) else y
            y = norm_o(y[0])                             # (L, H) after mtp.norm
            return y, model.lm_head(y)

        n = len(ids)
        y, logits = mtp_pass(nxt, h, list(range(1, n + 1)))
        last = logits[-1]
        top = torch.topk(last, 5)
        d1 = int(top.indices[0])
        # depth 2: the MTP output hidden state and the drafted token, at position n+1
        y2, logits2 = mtp_pass(nxt + [d1], torch.cat([h, y[-1:]], 0), list(range(1, n + 2)))
        d2 = int(logits2[-1].argmax())
    json.dump({"generator": "tools/make_mtp_reference.py", "prompt_ids": ids, "next_token": t_n,
               "draft1_top5_ids": top.indices.tolist(), "draft1_top5_logits": [float("%.6g" % v) for v in top.values],
               "draft1_top1_every_position": logits.argmax(-1).tolist(), "draft2_top1": d2},
              open(out, "w"), indent=1)
    print("t_n", t_n, "draft1", d1, "draft2", d2)


if __name__ == "__main__":
    main()
