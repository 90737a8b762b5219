"""Architectures as their users write them, beyond issue 37's own versions (modern_models.py):
Hugging Face's GPT-2 (Conv1D through addmm, a bool bias buffer and torch.where with finfo.min,
gelu_new, a tied head), a Llama with grouped-query attention (repeat_kv through expand and
reshape, rotary tables as non-persistent buffers), a ViT of nn.MultiheadAttention, ConvNeXt
blocks (depthwise 7x7, channels-last LayerNorm through permute, layer scale), an EfficientNet
MBConv (SiLU, squeeze-excite, batch norm), Swin with shifted windows (torch.roll, the attention
mask buffer, the relative position bias table gathered by its index buffer), a U-Net with batch
norm, max pooling and F.interpolate, MLP-Mixer, BERT with Hugging Face's int64 attention_mask and
token types, Deep & Cross Network and NCF; and a diffusers-style U-Net (GroupNorm, SiLU, a
sinusoidal timestep embedding computed in forward, a GroupNorm'd two-head self-attention)."""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4  # architectures.BATCH

def tokens(g):
    return [("idx", torch.randint(0, 50, (BATCH, 8), generator=g))]

def randn(*shape):
    return lambda g: [("x", torch.randn(BATCH, *shape, generator=g))]

# --- HF-style GPT-2: Conv1D (addmm), bool bias buffer + torch.where(finfo.min), gelu_new, arange positions
class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))
    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)

def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

class HFAttention(nn.Module):
    def __init__(self, d, h, n_pos):
        super().__init__()
        self.h, self.d = h, d
        self.register_buffer("bias", torch.tril(torch.ones((n_pos, n_pos), dtype=torch.bool)).view(1, 1, n_pos, n_pos), persistent=False)
        self.c_attn = Conv1D(3 * d, d)
        self.c_proj = Conv1D(d, d)
    def split_heads(self, t):
        new_shape = t.size()[:-1] + (self.h, self.d // self.h)
        return t.view(new_shape).permute(0, 2, 1, 3)
    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.d, dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        ql, kl = q.size(-2), k.size(-2)
        causal = self.bias[:, :, kl - ql: kl, :kl]
        mask_value = torch.finfo(w.dtype).min
        mask_value = torch.full([], mask_value, dtype=w.dtype, device=w.device)
        w = torch.where(causal, w.to(w.dtype), mask_value)
        w = F.softmax(w, dim=-1)
        o = torch.matmul(w, v)
        o = o.permute(0, 2, 1, 3).contiguous()
        o = o.view(o.size()[:-2] + (self.d,))
        return self.c_proj(o)

class HFBlock(nn.Module):
    def __init__(self, d, h, n_pos):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = HFAttention(d, h, n_pos)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.c_fc = Conv1D(4 * d, d)
        self.c_proj = Conv1D(d, 4 * d)
    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(gelu_new(self.c_fc(self.ln_2(x))))

class HFGPT2(nn.Module):
    def __init__(self, vocab=50, d=32, h=4, n_pos=16, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(n_pos, d)
        self.h = nn.ModuleList([HFBlock(d, h, n_pos) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
    def forward(self, idx):
        pos = torch.arange(0, idx.size(-1), dtype=torch.long, device=idx.device).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))

# --- Llama with GQA (repeat_kv via expand+reshape), rotary cos/sin cached as non-persistent buffers
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)

def repeat_kv(hs, n_rep):
    b, kvh, s, d = hs.shape
    if n_rep == 1:
        return hs
    hs = hs[:, :, None, :, :].expand(b, kvh, n_rep, s, d)
    return hs.reshape(b, kvh * n_rep, s, d)

class LlamaRMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps
    def forward(self, x):
        v = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(v + self.eps)
        return self.weight * x

class GQAAttention(nn.Module):
    def __init__(self, d=32, h=4, kvh=2, max_pos=16):
        super().__init__()
        self.h, self.kvh, self.hd = h, kvh, d // h
        self.q_proj = nn.Linear(d, h * self.hd, bias=False)
        self.k_proj = nn.Linear(d, kvh * self.hd, bias=False)
        self.v_proj = nn.Linear(d, kvh * self.hd, bias=False)
        self.o_proj = nn.Linear(h * self.hd, d, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        t = torch.arange(max_pos).float()
        freqs = torch.outer(t, inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)
    def forward(self, x):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kvh, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kvh, self.hd).transpose(1, 2)
        cos = self.cos_cached[:s][None, None]
        sin = self.sin_cached[:s][None, None]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.h // self.kvh)
        v = repeat_kv(v, self.h // self.kvh)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o = o.transpose(1, 2).contiguous().view(b, s, -1)
        return self.o_proj(o)

class GQAMLP(nn.Module):
    def __init__(self, d=32, f=64):
        super().__init__()
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)
    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

class GQALayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(32)
        self.self_attn = GQAAttention()
        self.post_attention_layernorm = LlamaRMSNorm(32)
        self.mlp = GQAMLP()
    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))

class LlamaGQA(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(50, 32)
        self.layers = nn.ModuleList([GQALayer() for _ in range(2)])
        self.norm = LlamaRMSNorm(32)
        self.lm_head = nn.Linear(32, 50, bias=False)
    def forward(self, idx):
        x = self.embed_tokens(idx)
        for l in self.layers:
            x = l(x)
        return self.lm_head(self.norm(x))

# --- ViT with nn.MultiheadAttention (batch_first) written by hand, pre-norm
class MHABlock(nn.Module):
    def __init__(self, d=32, h=4):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
    def forward(self, x):
        y = self.norm1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))

class MHAViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 32, 4, 4)
        self.cls = nn.Parameter(torch.zeros(1, 1, 32))
        self.pos = nn.Parameter(torch.randn(1, 17, 32) * .02)
        self.blocks = nn.Sequential(*[MHABlock() for _ in range(2)])
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 10)
    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])

# --- ConvNeXt block: depthwise 7x7, channels-last LayerNorm via permute, layer scale
class ConvNeXtBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-1 * torch.ones(dim))
    def forward(self, x):
        inp = x
        x = self.dwconv(x).permute(0, 2, 3, 1)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        x = (self.gamma * x).permute(0, 3, 1, 2)
        return inp + x

class ConvNeXt(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 4, 4)
        self.blocks = nn.Sequential(ConvNeXtBlock(16), ConvNeXtBlock(16))
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 10)
    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(self.norm(x.mean([-2, -1])))

# --- EfficientNet-ish MBConv with SiLU and squeeze-excite, BatchNorm
class SE(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, c // r, 1)
        self.fc2 = nn.Conv2d(c // r, c, 1)
    def forward(self, x):
        s = torch.sigmoid(self.fc2(F.silu(self.fc1(self.pool(x)))))
        return x * s

class MBConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.SiLU())
        self.expand = nn.Sequential(nn.Conv2d(16, 64, 1, bias=False), nn.BatchNorm2d(64), nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1, groups=64, bias=False), nn.BatchNorm2d(64), nn.SiLU())
        self.se = SE(64)
        self.project = nn.Sequential(nn.Conv2d(64, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.head = nn.Linear(16, 10)
    def forward(self, x):
        x = self.stem(x)
        x = x + self.project(self.se(self.dw(self.expand(x))))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

# --- Swin with shifted windows: torch.roll + attention mask buffer + relative position bias gather
def window_partition(x, ws):
    B, H, W, C = x.shape
    x = x.view(B, H // ws, ws, W // ws, ws, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws, ws, C)

def window_reverse(w, ws, H, W):
    B = int(w.shape[0] / (H * W / ws / ws))
    x = w.view(B, H // ws, W // ws, ws, ws, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, -1)

class WindowAttention(nn.Module):
    def __init__(self, dim, ws, heads):
        super().__init__()
        self.ws, self.heads = ws, heads
        self.scale = (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * .02)
        coords = torch.stack(torch.meshgrid([torch.arange(ws), torch.arange(ws)], indexing="ij"))
        cf = torch.flatten(coords, 1)
        rel = (cf[:, :, None] - cf[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += ws - 1
        rel[:, :, 1] += ws - 1
        rel[:, :, 0] *= 2 * ws - 1
        self.register_buffer("relative_position_index", rel.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
    def forward(self, x, mask=None):
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
            self.ws * self.ws, self.ws * self.ws, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            nW = mask.shape[0]
            attn = attn.view(B_ // nW, nW, self.heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, N, N)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
        return self.proj(x)

class SwinShifted(nn.Module):
    def __init__(self, H=8, W=8, dim=16, ws=4, shift=2, heads=2):
        super().__init__()
        self.H, self.W, self.ws, self.shift = H, W, ws, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, ws, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        img_mask = torch.zeros((1, H, W, 1))
        cnt = 0
        for h in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
            for w in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                img_mask[:, h, w, :] = cnt
                cnt += 1
        mw = window_partition(img_mask, ws).view(-1, ws * ws)
        am = mw.unsqueeze(1) - mw.unsqueeze(2)
        am = am.masked_fill(am != 0, float(-100.0)).masked_fill(am == 0, float(0.0))
        self.register_buffer("attn_mask", am)
    def forward(self, x):
        B, L, C = x.shape
        sc = x
        x = self.norm1(x).view(B, self.H, self.W, C)
        x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        xw = window_partition(x, self.ws).view(-1, self.ws * self.ws, C)
        aw = self.attn(xw, mask=self.attn_mask).view(-1, self.ws, self.ws, C)
        x = window_reverse(aw, self.ws, self.H, self.W)
        x = torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2)).view(B, self.H * self.W, C)
        x = sc + x
        return x + self.mlp(self.norm2(x))

# --- U-Net with BatchNorm, MaxPool, ConvTranspose, F.interpolate nearest, skip concat
class DC(nn.Sequential):
    def __init__(self, a, b):
        super().__init__(nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True),
                         nn.Conv2d(b, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True))

class UNetBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.inc = DC(3, 8)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), DC(8, 16))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), DC(16, 32))
        self.up1 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.conv1 = DC(32, 16)
        self.conv2 = DC(24, 8)
        self.outc = nn.Conv2d(8, 2, 1)
    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        y = self.conv1(torch.cat([x2, self.up1(x3)], dim=1))
        y = F.interpolate(y, scale_factor=2, mode="nearest")
        y = self.conv2(torch.cat([x1, y], dim=1))
        return self.outc(y)

# --- MLP-Mixer
class MixerBlock(nn.Module):
    def __init__(self, tokens, dim):
        super().__init__()
        self.n1 = nn.LayerNorm(dim)
        self.tok = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens))
        self.n2 = nn.LayerNorm(dim)
        self.ch = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
    def forward(self, x):
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.n2(x))

class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 4, 4)
        self.blocks = nn.Sequential(MixerBlock(16, 32), MixerBlock(16, 32))
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 10)
    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(dim=1))

# --- BERT with an attention-mask input (HF extended mask) and token types
class BertMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(50, 32)
        self.pos = nn.Embedding(16, 32)
        self.typ = nn.Embedding(2, 32)
        self.ln = nn.LayerNorm(32, eps=1e-12)
        self.q = nn.Linear(32, 32); self.k = nn.Linear(32, 32); self.v = nn.Linear(32, 32)
        self.o = nn.Linear(32, 32)
        self.ln2 = nn.LayerNorm(32, eps=1e-12)
        self.pool = nn.Linear(32, 32)
        self.cls = nn.Linear(32, 2)
    def forward(self, input_ids, attention_mask, token_type_ids):
        B, S = input_ids.shape
        pos = torch.arange(S, device=input_ids.device).expand(B, -1)
        x = self.ln(self.word(input_ids) + self.pos(pos) + self.typ(token_type_ids))
        ext = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        def heads(t):
            return t.view(B, S, 4, 8).permute(0, 2, 1, 3)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(8) + ext
        p = F.softmax(s, dim=-1)
        c = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous().view(B, S, 32)
        x = self.ln2(x + self.o(c))
        return self.cls(torch.tanh(self.pool(x[:, 0])))

def bert_mask_inputs(g):
    ids = torch.randint(0, 50, (BATCH, 8), generator=g)
    mask = torch.ones(BATCH, 8, dtype=torch.long)
    mask[:, 6:] = 0
    tt = torch.zeros(BATCH, 8, dtype=torch.long)
    tt[:, 4:] = 1
    return [("input_ids", ids), ("attention_mask", mask), ("token_type_ids", tt)]

# --- Deep & Cross Network v2 and NCF (recommenders)
class DCN(nn.Module):
    def __init__(self, fields=4, vocab=20, d=8, layers=2):
        super().__init__()
        self.emb = nn.ModuleList([nn.Embedding(vocab, d) for _ in range(fields)])
        n = fields * d + 3
        self.cross = nn.ModuleList([nn.Linear(n, n) for _ in range(layers)])
        self.deep = nn.Sequential(nn.Linear(n, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU())
        self.out = nn.Linear(n + 16, 1)
    def forward(self, sparse, dense):
        x0 = torch.cat([e(sparse[:, i]) for i, e in enumerate(self.emb)] + [dense], dim=1)
        x = x0
        for c in self.cross:
            x = x0 * c(x) + x
        return torch.sigmoid(self.out(torch.cat([x, self.deep(x0)], dim=1)))

def dcn_inputs(g):
    return [("sparse", torch.randint(0, 20, (BATCH, 4), generator=g)), ("dense", torch.randn(BATCH, 3, generator=g))]

class NCF(nn.Module):
    def __init__(self, users=30, items=40, d=8):
        super().__init__()
        self.ug, self.ig = nn.Embedding(users, d), nn.Embedding(items, d)
        self.um, self.im = nn.Embedding(users, d), nn.Embedding(items, d)
        self.mlp = nn.Sequential(nn.Linear(2 * d, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU())
        self.pred = nn.Linear(d + 8, 1)
    def forward(self, user, item):
        gmf = self.ug(user) * self.ig(item)
        mlp = self.mlp(torch.cat([self.um(user), self.im(item)], dim=-1))
        return self.pred(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)

def ncf_inputs(g):
    return [("user", torch.randint(0, 30, (BATCH,), generator=g)), ("item", torch.randint(0, 40, (BATCH,), generator=g))]

# --- diffusers-style U-Net block: sinusoidal timestep embedding computed in forward, GroupNorm
# and SiLU around convolutions, the time embedding added per channel, a GroupNorm'd self-attention
def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

class ResnetBlock(nn.Module):
    def __init__(self, c_in, c_out, t_dim):
        super().__init__()
        self.norm1 = nn.GroupNorm(4, c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.time_emb_proj = nn.Linear(t_dim, c_out)
        self.norm2 = nn.GroupNorm(4, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.shortcut = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()
    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.shortcut(x) + h

class AttnBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.group_norm = nn.GroupNorm(4, c)
        self.to_qkv = nn.Linear(c, 3 * c)
        self.to_out = nn.Linear(c, c)
    def forward(self, x):
        B, C, H, W = x.shape
        h = self.group_norm(x).view(B, C, H * W).transpose(1, 2)
        q, k, v = (t.view(B, H * W, 2, C // 2).transpose(1, 2)
                   for t in self.to_qkv(h).chunk(3, dim=-1))  # 2 heads, as diffusers splits them
        h = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, H * W, C)
        return x + self.to_out(h).transpose(1, 2).reshape(B, C, H, W)

class DiffusionUNet(nn.Module):
    def __init__(self, c=16, t_dim=32):
        super().__init__()
        self.t_dim = t_dim
        self.time_embedding = nn.Sequential(nn.Linear(t_dim, t_dim), nn.SiLU(), nn.Linear(t_dim, t_dim))
        self.conv_in = nn.Conv2d(4, c, 3, padding=1)
        self.down = ResnetBlock(c, 2 * c, t_dim)
        self.downsample = nn.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1)
        self.mid = ResnetBlock(2 * c, 2 * c, t_dim)
        self.attn = AttnBlock(2 * c)
        self.up = ResnetBlock(4 * c, c, t_dim)
        self.norm_out = nn.GroupNorm(4, c)
        self.conv_out = nn.Conv2d(c, 4, 3, padding=1)
    def forward(self, x, t):
        temb = self.time_embedding(timestep_embedding(t, self.t_dim))
        h = self.conv_in(x)
        d = self.down(h, temb)
        m = self.attn(self.mid(self.downsample(d), temb))
        u = F.interpolate(m, scale_factor=2.0, mode="nearest")
        u = self.up(torch.cat([u, d], dim=1), temb)
        return self.conv_out(F.silu(self.norm_out(u)))

def diffusion_inputs(g):
    return [("x", torch.randn(BATCH, 4, 8, 8, generator=g)),
            ("t", torch.randint(0, 1000, (BATCH,), generator=g).float())]

USER = [
    ("hf_gpt2", HFGPT2, tokens),
    ("llama_gqa", LlamaGQA, tokens),
    ("mha_vit", MHAViT, randn(3, 16, 16)),
    ("convnext", ConvNeXt, randn(3, 16, 16)),
    ("mbconv", MBConv, randn(3, 16, 16)),
    ("swin_shifted", SwinShifted, randn(64, 16)),
    ("unet_bn", UNetBN, randn(3, 16, 16)),
    ("mixer", Mixer, randn(3, 16, 16)),
    ("bert_mask", BertMask, bert_mask_inputs),
    ("dcn", DCN, dcn_inputs),
    ("ncf", NCF, ncf_inputs),
    ("diffusion_unet", DiffusionUNet, diffusion_inputs),
]
