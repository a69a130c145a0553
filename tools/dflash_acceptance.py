#!/usr/bin/env python3
"""dflash_acceptance.py MODEL [N_PROMPTS] [BLOCK] — an independent numpy
(float32) reference of the DFlash speculative loop on tinycoder-shaped
Qwen3 models, for checking the engine's acceptance: for the first N raw
completion prompts of MODEL/prompts/completion.jsonl it runs plain greedy
decoding of 64 tokens with the DFlash block drafter in MODEL/dflash (the
definition in shared/models/README.md: ctx = hidden_norm(fc(residual after
the target layers)), block [last, MASK x (B-1)], queries from the block,
keys/values from [ctx ; block], no mask) and prints, per prompt, the drafts
accepted, the verify steps and tokens per verify step, then the mean.
Prompt ids come from `build/kestrel tokenize`. Needs python3-numpy (Debian);
not part of the test suite (a developer's cross-check)."""
import json, struct, subprocess, sys
import numpy as np

def load(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        hdr = json.loads(f.read(n)); base = 8 + n
        out = {}
        for k, v in hdr.items():
            if k == '__metadata__': continue
            a, b = v['data_offsets']; f.seek(base + a)
            raw = np.frombuffer(f.read(b - a), dtype=np.uint16)
            assert v['dtype'] == 'BF16'
            out[k] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(v['shape'])
        return out

def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

def rope(x, pos, theta):  # x: (T, H, D), pos: (T,)
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.outer(pos, inv)
    cos = np.cos(np.concatenate([ang, ang], -1)).astype(np.float32)[:, None, :]
    sin = np.sin(np.concatenate([ang, ang], -1)).astype(np.float32)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + np.concatenate([-x2, x1], -1) * sin

def attend(q, k, v, mask):  # q (T,H,D) k,v (S,KH,D) mask (T,S) bool or None
    h, kh = q.shape[1], k.shape[1]
    k = np.repeat(k, h // kh, axis=1); v = np.repeat(v, h // kh, axis=1)
    s = np.einsum('thd,shd->hts', q, k) / np.sqrt(q.shape[-1])
    if mask is not None: s = np.where(mask[None], s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
    return np.einsum('hts,shd->thd', s, v)

def mlp(x, W, p):
    g = x @ W[p + 'mlp.gate_proj.weight'].T; u = x @ W[p + 'mlp.up_proj.weight'].T
    return (g / (1 + np.exp(-g)) * u) @ W[p + 'mlp.down_proj.weight'].T

class Target:
    def __init__(self, W, cfg):
        self.W, self.c = W, cfg
        self.L = cfg['num_hidden_layers']; self.H = cfg['num_attention_heads']
        self.KH = cfg['num_key_value_heads']; self.D = cfg['head_dim']
        self.eps = cfg['rms_norm_eps']; self.theta = cfg['rope_parameters']['rope_theta']
        self.k = [np.zeros((0, self.KH, self.D), np.float32) for _ in range(self.L)]
        self.v = [np.zeros((0, self.KH, self.D), np.float32) for _ in range(self.L)]

    def crop(self, n):
        self.k = [k[:n] for k in self.k]; self.v = [v[:n] for v in self.v]

    def forward(self, ids):  # appends to the cache; returns logits, hidden states per layer
        W, T, p0 = self.W, len(ids), self.k[0].shape[0]
        pos = np.arange(p0, p0 + T); x = W['model.embed_tokens.weight'][ids]
        mask = pos[:, None] >= np.arange(p0 + T)[None, :]
        hs = []
        for l in range(self.L):
            p = f'model.layers.{l}.'
            h = rms(x, W[p + 'input_layernorm.weight'], self.eps)
            q = (h @ W[p + 'self_attn.q_proj.weight'].T).reshape(T, self.H, self.D)
            k = (h @ W[p + 'self_attn.k_proj.weight'].T).reshape(T, self.KH, self.D)
            v = (h @ W[p + 'self_attn.v_proj.weight'].T).reshape(T, self.KH, self.D)
            q = rope(rms(q, W[p + 'self_attn.q_norm.weight'], self.eps), pos, self.theta)
            k = rope(rms(k, W[p + 'self_attn.k_norm.weight'], self.eps), pos, self.theta)
            self.k[l] = np.concatenate([self.k[l], k]); self.v[l] = np.concatenate([self.v[l], v])
            o = attend(q, self.k[l], self.v[l], mask).reshape(T, -1)
            x = x + o @ W[p + 'self_attn.o_proj.weight'].T
            x = x + mlp(rms(x, W[p + 'post_attention_layernorm.weight'], self.eps), W, p)
            hs.append(x)
        logits = rms(x, W['model.norm.weight'], self.eps) @ W['model.embed_tokens.weight'].T
        return logits, hs

class DFlash:
    def __init__(self, W, cfg, target):
        self.W, self.t = W, target
        self.ids = cfg['dflash_config']['target_layer_ids']
        self.mask_id = cfg['dflash_config']['mask_token_id']
        self.L = cfg['num_hidden_layers']; self.eps = cfg['rms_norm_eps']
        self.ctx = np.zeros((0, cfg['hidden_size']), np.float32)

    def add_ctx(self, hs, rows):
        f = np.concatenate([hs[l][:rows] for l in self.ids], -1) @ self.W['fc.weight'].T
        self.ctx = np.concatenate([self.ctx, rms(f, self.W['hidden_norm.weight'], self.eps)])

    def draft(self, last, B):
        W, t = self.W, self.t
        n = self.ctx.shape[0]
        x = t.W['model.embed_tokens.weight'][[last] + [self.mask_id] * (B - 1)]
        qpos = np.arange(n, n + B); kpos = np.arange(n + B)
        for l in range(self.L):
            p = f'layers.{l}.'
            h = rms(x, W[p + 'input_layernorm.weight'], self.eps)
            q = (h @ W[p + 'self_attn.q_proj.weight'].T).reshape(B, t.H, t.D)
            kv_in = np.concatenate([self.ctx, h])
            k = (kv_in @ W[p + 'self_attn.k_proj.weight'].T).reshape(n + B, t.KH, t.D)
            v = (kv_in @ W[p + 'self_attn.v_proj.weight'].T).reshape(n + B, t.KH, t.D)
            q = rope(rms(q, W[p + 'self_attn.q_norm.weight'], self.eps), qpos, t.theta)
            k = rope(rms(k, W[p + 'self_attn.k_norm.weight'], self.eps), kpos, t.theta)
            o = attend(q, k, v, None).reshape(B, -1)
            x = x + o @ W[p + 'self_attn.o_proj.weight'].T
            x = x + mlp(rms(x, W[p + 'post_attention_layernorm.weight'], self.eps), W, p)
        logits = rms(x, W['norm.weight'], self.eps) @ t.W['model.embed_tokens.weight'].T
        return list(np.argmax(logits[1:], -1))

def main():
    model = sys.argv[1]; n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    B = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    cfg = json.load(open(f'{model}/config.json')); dcfg = json.load(open(f'{model}/dflash/config.json'))
    idx = json.load(open(f'{model}/model.safetensors.index.json'))
    W = {}
    for f in sorted(set(idx['weight_map'].values())): W.update(load(f'{model}/{f}'))
    DW = load(f'{model}/dflash/model.safetensors')
    prompts = [json.loads(l)['prompt'] for l in open(f'{model}/prompts/completion.jsonl')][:n]
    tot_steps = tot_tok = 0
    for i, text in enumerate(prompts):
        ids = json.loads(subprocess.check_output(['build/kestrel', 'tokenize', model, text]))
        t = Target(W, cfg); d = DFlash(DW, dcfg, t)
        logits, hs = t.forward(ids); d.add_ctx(hs, len(ids))
        out = [int(np.argmax(logits[-1]))]; steps = acc_sum = 0
        while len(out) < 64:
            drafts = d.draft(out[-1], B)
            logits, hs = t.forward([out[-1]] + drafts)
            post = list(np.argmax(logits, -1)); a = 0
            while a < B - 1 and drafts[a] == post[a]: a += 1
            out += drafts[:a] + [int(post[a])]
            t.crop(len(ids) + len(out) - 1); d.add_ctx(hs, a + 1)
            steps += 1; acc_sum += a
        tot_steps += steps; tot_tok += steps + acc_sum
        print(f'prompt {i}: {len(ids)} prompt tokens, {acc_sum} accepted in {steps} steps, '
              f'{(steps + acc_sum) / steps:.2f} tokens per verify step', flush=True)
    print(f'mean tokens per verify step: {tot_tok / tot_steps:.3f} (block {B})')

main()
