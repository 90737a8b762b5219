"""The architectures of issue 37, written the way their users write them (small): nanoGPT's GPT-2
(masked_fill of a tril buffer, and SDPA with is_causal and a tied head), a Llama-style decoder,
a timm-style ViT, a U-Net, nn.Transformer, CLIP with F.normalize, Wide&Deep, a soft MoE, Swin-like
window attention, facebookresearch DLRM's interaction, LSTM and GRU. Imported by
architectures.py, which exports, imports, trains and compares each of them."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4
VOCAB, SEQ, EMBD, HEADS = 64, 8, 32, 4


class CausalSelfAttention(nn.Module):
    # nanoGPT's attention: one c_attn for q, k, v, heads split by view/transpose, a causal mask
    # from a registered tril buffer (or SDPA's is_causal).
    def __init__(self, sdpa):
        super().__init__()
        self.c_attn = nn.Linear(EMBD, 3 * EMBD)
        self.c_proj = nn.Linear(EMBD, EMBD)
        self.sdpa = sdpa
        self.register_buffer("bias", torch.tril(torch.ones(SEQ, SEQ)).view(1, 1, SEQ, SEQ))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(EMBD, dim=2)
        k = k.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        q = q.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        v = v.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GPTBlock(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.ln_1 = nn.LayerNorm(EMBD)
        self.attn = CausalSelfAttention(sdpa)
        self.ln_2 = nn.LayerNorm(EMBD)
        self.mlp = nn.Sequential(nn.Linear(EMBD, 4 * EMBD), nn.GELU(), nn.Linear(4 * EMBD, EMBD))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, sdpa=False, layers=2):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, EMBD)
        self.wpe = nn.Embedding(SEQ, EMBD)
        self.h = nn.ModuleList(GPTBlock(sdpa) for _ in range(layers))
        self.ln_f = nn.LayerNorm(EMBD)
        self.lm_head = nn.Linear(EMBD, VOCAB, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = EMBD // HEADS
        self.attention_norm = RMSNorm(EMBD)
        self.wq = nn.Linear(EMBD, EMBD, bias=False)
        self.wk = nn.Linear(EMBD, EMBD, bias=False)
        self.wv = nn.Linear(EMBD, EMBD, bias=False)
        self.wo = nn.Linear(EMBD, EMBD, bias=False)
        self.ffn_norm = RMSNorm(EMBD)
        self.w1 = nn.Linear(EMBD, 64, bias=False)
        self.w2 = nn.Linear(64, EMBD, bias=False)
        self.w3 = nn.Linear(EMBD, 64, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        # Rotary embeddings computed in forward, as Hugging Face's LlamaRotaryEmbedding.
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        t = torch.arange(T, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        h = self.attention_norm(x)
        q = self.wq(h).view(B, T, HEADS, self.head_dim).transpose(1, 2)
        k = self.wk(h).view(B, T, HEADS, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(B, T, HEADS, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, EMBD))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, EMBD)
        self.layers = nn.ModuleList(LlamaBlock() for _ in range(layers))
        self.norm = RMSNorm(EMBD)
        self.output = nn.Linear(EMBD, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


class TimmAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.num_heads, self.head_dim = heads, dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class TimmBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = TimmAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TimmViT(nn.Module):
    def __init__(self, size=32, patch=8, dim=32):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, (size // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[TimmBlock(dim, HEADS) for _ in range(2)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU(inplace=True))


class UNet(nn.Module):
    # Two levels: max-pool down, ConvTranspose2d up on one level and bilinear nn.Upsample on the
    # other, skip connections by concatenation.
    def __init__(self):
        super().__init__()
        self.inc = double_conv(3, 8)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), double_conv(8, 16))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), double_conv(16, 32))
        self.up1 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.conv1 = double_conv(32, 16)
        self.up2 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.conv2 = double_conv(24, 8)
        self.outc = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x = self.conv1(torch.cat([x2, self.up1(x3)], dim=1))
        x = self.conv2(torch.cat([x1, self.up2(x)], dim=1))
        return self.outc(x)


class Seq2Seq(nn.Module):
    # nn.Transformer with a causal target mask, sequence-first as its default.
    def __init__(self):
        super().__init__()
        self.transformer = nn.Transformer(d_model=EMBD, nhead=HEADS, num_encoder_layers=1,
                                          num_decoder_layers=1, dim_feedforward=64, dropout=0.0)
        self.out = nn.Linear(EMBD, 8)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
        y = self.transformer(src.transpose(0, 1), tgt.transpose(0, 1), tgt_mask=mask)
        return self.out(y.transpose(0, 1))


class CLIP(nn.Module):
    # Image and text towers, each embedding L2-normalised; the score of a sample's own pair.
    def __init__(self):
        super().__init__()
        self.image = nn.Sequential(nn.Linear(48, 64), nn.GELU(), nn.Linear(64, 32))
        self.text_emb = nn.Embedding(VOCAB, 32)
        self.text = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, image, text):
        i = F.normalize(self.image(image), dim=-1)
        t = F.normalize(self.text(self.text_emb(text).mean(dim=1)), dim=-1)
        return self.logit_scale.exp() * (i * t).sum(dim=-1, keepdim=True)


class WideDeep(nn.Module):
    # Per-field embeddings read as ids[:, f], a wide linear part on dense features.
    def __init__(self, fields=4, rows=20, dim=8):
        super().__init__()
        self.embs = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(fields))
        self.wide = nn.Linear(10, 1)
        self.deep = nn.Sequential(nn.Linear(fields * dim + 10, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, dense, ids):
        e = [emb(ids[:, f]) for f, emb in enumerate(self.embs)]
        return self.wide(dense) + self.deep(torch.cat(e + [dense], dim=1))


class SoftMoE(nn.Module):
    # A softmax gate over experts; experts' outputs stacked and combined by a broadcast product.
    def __init__(self, experts=4, dim=16):
        super().__init__()
        self.gate = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, 32), nn.ReLU(),
                                                   nn.Linear(32, dim)) for _ in range(experts))
        self.head = nn.Linear(dim, 2)

    def forward(self, x):
        gate = F.softmax(self.gate(x), dim=-1)
        out = torch.stack([e(x) for e in self.experts], dim=1)
        return self.head((gate.unsqueeze(-1) * out).sum(1))


def window_partition(x, ws):
    B, H, W, C = x.shape
    x = x.view(B, H // ws, ws, W // ws, ws, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws * ws, C)


def window_reverse(windows, ws, H, W):
    B = int(windows.shape[0] / (H * W / ws / ws))
    x = windows.view(B, H // ws, W // ws, ws, ws, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, -1)


class SwinBlock(nn.Module):
    # Swin's window attention: windows folded into the batch, attention within each, folded back.
    def __init__(self, dim=16, res=8, ws=4):
        super().__init__()
        self.res, self.ws = res, ws
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 32), nn.GELU(), nn.Linear(32, dim))
        self.head = nn.Linear(dim, 3)

    def forward(self, x):
        B, L, C = x.shape
        h = self.norm1(x).view(B, self.res, self.res, C)
        w = window_partition(h, self.ws)
        w, _ = self.attn(w, w, w, need_weights=False)
        x = x + window_reverse(w, self.ws, self.res, self.res).view(B, L, C)
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(dim=1))


class FbDLRM(nn.Module):
    # facebookresearch/dlrm's dot interaction: bmm(T, T^T), then the strict lower triangle.
    def __init__(self, tables=3, rows=30, dim=8):
        super().__init__()
        self.bot = nn.Sequential(nn.Linear(13, 16), nn.ReLU(), nn.Linear(16, dim), nn.ReLU())
        self.embs = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        n = tables + 1
        self.li = torch.tensor([i for i in range(n) for j in range(i)])
        self.lj = torch.tensor([j for i in range(n) for j in range(i)])
        self.top = nn.Sequential(nn.Linear(dim + n * (n - 1) // 2, 16), nn.ReLU(),
                                 nn.Linear(16, 1))

    def forward(self, dense, ids):
        x = self.bot(dense)
        ly = [e(ids[:, k]) for k, e in enumerate(self.embs)]
        (batch_size, d) = x.shape
        T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        Zflat = Z[:, self.li, self.lj]
        return self.top(torch.cat([x] + [Zflat], dim=1))


class Recurrent(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = getattr(nn, cell)(16, 24, batch_first=True)
        self.head = nn.Linear(24, 3)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y[:, -1])


def tokens(g):
    return [("ids", torch.randint(0, VOCAB, (BATCH, SEQ), generator=g))]


def seq2seq_inputs(g):
    return [("src", torch.randn(BATCH, 6, EMBD, generator=g)),
            ("tgt", torch.randn(BATCH, 5, EMBD, generator=g))]


def clip_inputs(g):
    return [("image", torch.randn(BATCH, 48, generator=g)),
            ("text", torch.randint(0, VOCAB, (BATCH, 6), generator=g))]


def wide_deep_inputs(g):
    return [("dense", torch.randn(BATCH, 10, generator=g)),
            ("ids", torch.randint(0, 20, (BATCH, 4), generator=g))]


def fb_dlrm_inputs(g):
    return [("dense", torch.randn(BATCH, 13, generator=g)),
            ("ids", torch.randint(0, 30, (BATCH, 3, 2), generator=g))]


def randn(*shape):
    return lambda g: [("x", torch.randn(BATCH, *shape, generator=g))]


MODERN = [
    ("nanogpt", lambda: NanoGPT(sdpa=False), tokens),
    ("nanogpt_sdpa", lambda: NanoGPT(sdpa=True), tokens),
    ("llama", Llama, tokens),
    ("timm_vit", TimmViT, randn(3, 32, 32)),
    ("unet", UNet, randn(3, 16, 16)),
    ("nn_transformer", Seq2Seq, seq2seq_inputs),
    ("clip", CLIP, clip_inputs),
    ("wide_deep", WideDeep, wide_deep_inputs),
    ("soft_moe", SoftMoE, randn(16)),
    ("swin_window", SwinBlock, randn(64, 16)),
    ("fb_dlrm", FbDLRM, fb_dlrm_inputs),
    ("lstm", lambda: Recurrent("LSTM"), randn(6, 16)),
    ("gru", lambda: Recurrent("GRU"), randn(6, 16)),
]
