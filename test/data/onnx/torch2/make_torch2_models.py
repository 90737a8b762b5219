#!/usr/bin/env python3
"""Writes the layer patterns of ../torch/make_torch_models.py as torch 2.x exports them.

../torch holds PyTorch 1.13's TorchScript exports. torch 2.x exports differently by default
(torch.onnx.export(..., dynamo=True) since 2.9): opset 18+, graphs traced by torch.export and
optimised by onnxscript, initializers of 1 KiB or more in an external data file `<model>.onnx.data`
beside the model, and equal-valued parameters merged into one initializer. This script writes, for
every pattern, with the pattern module, seeds, inputs and reference files of ../torch:
  <pattern>_dynamo.onnx         dynamo=True, eval mode, dynamic batch (dynamic_axes)
  <pattern>_dynamo_static.onnx  dynamo=True, eval mode, batch 4 baked in
  <pattern>_dynamo_train.onnx   dynamo=True, the module in train mode when exported (onnxscript's
                                optimiser still folds batch norm into convolutions)
  <pattern>_dynamo_train_noopt.onnx  the same with optimize=False (batch norm kept)
  <pattern>_legacy.onnx         dynamo=False (the TorchScript exporter of torch 2.x), opset 17,
                                eval mode, dynamic batch
with <stem>.onnx.data where torch wrote one, and <stem>/ reference directories as ../torch
describes (torch's output, MSE loss and output after one SGD step, lr 0.1). One more pattern,
two_norms, shows the merged parameters: two LayerNorms with equal initial weights. models.json lists
every export as ../torch/models.json does, plus "torch": the version that wrote it.

Generated with torch 2.15.0 and onnxscript 0.7 from PyPI (a virtual environment; the tests only
read the committed files):
  python3 -m venv /tmp/t2 && /tmp/t2/bin/pip install torch onnx onnxscript
  /tmp/t2/bin/python test/data/onnx/torch2/make_torch2_models.py test/data/onnx/torch2
(--only=PATTERN rewrites one pattern's files; encoder_stack, class_token, mha_nobias,
embedding_bag_sum, embedding_bag_mean and two_bags were added, and embedding_bag_offsets rewritten with
references that way, by torch 2.15.0; so were rms_norm, swiglu, causal_mask and broadcast_math, the
element-wise code of Llama and nanoGPT that maps onto the general ops, with torch 2.15.0 and
onnxscript 0.7.2; and tied_head (nanoGPT's tied LM head), upsample (ConvTranspose2d and
nn.Upsample) and softmax_axes (softmax and log_softmax over an inner axis, LayerNorm over two
axes) with torch 2.15.0; and timm_qkv, seq_first, seq_first_attention and window_fold (the batch
axis moved by a permute or transpose, or folded with attention heads or Swin's windows) with torch 2.15.0 and onnxscript 0.7.2;
and sliced_bags (EmbeddingBags over ids[:, k] of one ids tensor) with torch 2.15.0; and
dot_interaction_index (DLRM's Z[:, li, lj]) with torch 2.15.0; and lstm_stack and gru_layer
(nn.LSTM, two bidirectional layers, and nn.GRU) with torch 2.15.0; and cross_attention
(nn.MultiheadAttention over a memory, slicing its packed in_proj_weight, after causal
self-attention) with torch 2.15.0; and window_traced (Swin's window_reverse, whose int() of a shape
bakes the traced batch size into the legacy export's Reshape targets) with torch 2.15.0; and
weight_views (Swin's relative position bias over shifted windows, weight[:, None] and
bias.view(1, -1, 1)) with torch 2.15.0 and onnxscript 0.7; and attention_mask (Hugging Face's
BERT embeddings and its int64 attention_mask as an additive bias) with torch 2.15.0; and
library_vision and library_attention (what torchvision's MobileNetV3, Swin, ConvNeXt and MaxViT
and Hugging Face's sdpa attention export: Hardswish, Hardsigmoid, a zero F.pad, a mask written by
slice assignment, stepped slices, as_strided, einsum, IsNaN, GatherElements of buffers) with torch
2.15.0 and onnxscript 0.7.2; and group_norm (nn.GroupNorm and nn.InstanceNorm2d) with torch
2.15.0; and batch_constants (OPT's position ids from a cumulative sum of ones(batch, T), BLOOM's
ALiBi biases tiled over the batch) with torch 2.15.0 and onnxscript 0.7.2; and zero_biases
(linears whose all-zero biases the optimiser drops) with torch 2.15.0 and onnxscript 0.7.2; and
optimiser_folds and relative_bias (what the optimiser folds parameters and buffers into: layer
scales, GroupNorm's affine, a reused layer, rotary tables, Swin's relative position bias) with
torch 2.15.0 and onnxscript 0.7.2; and rotary_split (GPT-J's sine and cosine split from a
gathered sinusoid table) with torch 2.15.0 and onnxscript 0.7.2; and padded_positions
(RoBERTa's position ids, a cumulative sum of the ids' padding mask) with torch 2.15.0 and
onnxscript 0.7.2; and audio_front_end (Whisper's nn.Conv1d front end) with torch 2.15.0 and
onnxscript 0.7.2; and norm_affines (LayerNorm with bias=False and with elementwise_affine=False)
and eos_pooling (CLIP's state at each sample's argmax position) and cosine_windows (Swin V2's
attention: a zeroed slice of the qkv bias, cosine attention in folded windows, a clamped logit
scale) and token_batch_norm (LeViT's batch norm over tokens folded into the batch and its
attention biases gathered along their second axis) with torch 2.15.0 and onnxscript 0.7.2; and
trained_scalars (a learned temperature read by four ops, ReZero's gate) and position_bias_mlp
(Swin V2's MLP over a constant coordinate table) and interpolated_bias (BEiT's position table
interpolated to its own size, two slices of one table) and trigram_pad (MobileBERT's tokens
shifted by F.pad) with torch 2.15.0 and onnxscript 0.7.2; and shifted_ids (BART's decoder ids by
slice assignment into zeros, mBART's gathered start token, slice assignments of activations) with
torch 2.15.0 and onnxscript 0.7.2.)
"""
import copy
import glob
import json
import math
import os
import shutil
import sys
import warnings

import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
import make_torch_models as patterns  # noqa: E402  (the pattern modules and reference writer)

ARGS = [a for a in sys.argv[1:] if not a.startswith("--only=")]
# --only=PATTERN rewrites that pattern's exports and keeps every other file and models.json entry.
ONLY = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")), None)
OUT = ARGS[0] if ARGS else HERE
patterns.OUT = OUT

# suffix, variant, train mode, export keyword arguments
VARIANTS = [
    ("dynamo", "dynamic", False, {"dynamo": True}),
    ("dynamo_static", "static", False, {"dynamo": True}),
    ("dynamo_train", "train", True, {"dynamo": True}),
    ("dynamo_train_noopt", "train", True, {"dynamo": True, "optimize": False}),
    ("legacy", "dynamic", False, {"dynamo": False, "opset_version": 17}),
]


class TwoNorms(torch.nn.Module):
    # Two LayerNorms with torch's initial values (ones, zeros): the dynamo exporter's optimiser
    # merges their equal weights and biases into one initializer each, read by both norms. 32
    # features, so that the linear weights (4 KiB) go to the external data file.
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 32)
        self.norm1 = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.norm2 = torch.nn.LayerNorm(32)

    def forward(self, x):
        return self.norm2(self.fc2(torch.relu(self.norm1(self.fc1(x)))))


class EncoderStack(torch.nn.Module):
    # Two nn.TransformerEncoder layers with torch's own initialisation (all-zero attention
    # biases, which the dynamo optimiser drops): the second attention's input is an activation,
    # and its reshapes read the batch from the model's input.
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, dropout=0.0,
                                                 activation="gelu", batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x)


class ClassToken(torch.nn.Module):
    # A small ViT: patch embedding by a strided conv, a learned class token expanded over the batch
    # (Expand of a weight), position embeddings, a pre-norm encoder layer with exact GELU, and a
    # tanh pooler on the class token (x[:, 0], which torch.export writes as a full slice of the
    # batch first).
    def __init__(self):
        super().__init__()
        self.patch = torch.nn.Conv2d(3, 16, 4, stride=4)
        self.cls_token = torch.nn.Parameter(0.02 * torch.randn(1, 1, 16))
        self.pos = torch.nn.Parameter(0.02 * torch.randn(1, 5, 16))
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu",
                                                      batch_first=True, norm_first=True)
        self.pool = torch.nn.Linear(16, 16)

    def forward(self, x):
        p = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), p], dim=1) + self.pos
        return torch.tanh(self.pool(self.layer(h)[:, 0]))


class AttentionNoBias(torch.nn.Module):
    # nn.MultiheadAttention(bias=False): no input-projection Add, and an output projection that
    # the TorchScript exporter writes as a MatMul by the transposed weight instead of a Gemm.
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(embed_dim=8, num_heads=2, bias=False,
                                                batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class EmbeddingBagFixed(torch.nn.Module):
    # nn.EmbeddingBag over [batch, bag] ids (fixed-size bags, DLRM's sparse features): torch 2.x
    # writes it as a Loop over the bags with every exporter, torch 1.13 as Gather + ReduceSum.
    def __init__(self, mode):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(20, 6, mode=mode)
        self.fc = torch.nn.Linear(6, 2)

    def forward(self, ids):
        return self.fc(self.bag(ids))


class TwoBags(torch.nn.Module):
    # Two EmbeddingBags over [batch, 3] ids, as DLRM's sparse features:
    # torch.export writes the offsets arange (from one input's batch size), the bag count and the
    # empty sequence once, and every bag's Loop reads them.
    def __init__(self):
        super().__init__()
        self.bag0 = torch.nn.EmbeddingBag(20, 6, mode="sum")
        self.bag1 = torch.nn.EmbeddingBag(30, 6, mode="sum")
        self.fc = torch.nn.Linear(12, 2)

    def forward(self, ids0, ids1):
        return self.fc(torch.cat([self.bag0(ids0), self.bag1(ids1)], dim=1))


class RMSNorm(torch.nn.Module):
    # Llama's RMSNorm written out (x * rsqrt(mean(x^2) + eps) * weight: Pow, ReduceMean, Add,
    # Sqrt and Reciprocal, and Muls that broadcast a per-position scalar and a [features] weight),
    # then a Linear.
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(8))
        self.eps = 1e-6
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return self.fc(h)


class SwiGLU(torch.nn.Module):
    # Llama's feed-forward: w2(silu(w1(x)) * w3(x)), bias-free.
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(8, 16, bias=False)
        self.w2 = torch.nn.Linear(16, 8, bias=False)
        self.w3 = torch.nn.Linear(8, 16, bias=False)

    def forward(self, x):
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class CausalMask(torch.nn.Module):
    # nanoGPT's CausalSelfAttention with its position embedding: wpe(arange(T)) added to the
    # input, scores masked_fill'ed with -inf where a registered tril buffer is 0, softmax, @ v,
    # and the output projection (a Linear).
    def __init__(self):
        super().__init__()
        self.n_head = 2
        self.wpe = torch.nn.Embedding(5, 8)
        self.c_attn = torch.nn.Linear(8, 24)
        self.c_proj = torch.nn.Linear(8, 8)
        self.register_buffer("bias", torch.tril(torch.ones(5, 5)).view(1, 1, 5, 5))

    def forward(self, x):
        B, T, C = x.size()
        x = x + self.wpe(torch.arange(0, T, dtype=torch.long, device=x.device))
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = torch.nn.functional.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class BroadcastMath(torch.nn.Module):
    # Element-wise math that broadcasts against a [features] parameter and a per-sample scalar
    # (a max over two axes): sub, div, max, min, abs, sqrt, exp and log.
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)
        self.center = torch.nn.Parameter(0.1 * torch.randn(6))
        self.floor = torch.nn.Parameter(-0.5 + 0.1 * torch.randn(6))

    def forward(self, x):
        h = self.fc(x)
        m = h.abs().amax(dim=(1, 2), keepdim=True) + 1.0
        z = torch.minimum(torch.maximum((h - self.center) / m, self.floor), torch.sqrt(m))
        return torch.exp(z) - torch.log(h * h + 1.0)


class TiedHead(torch.nn.Module):
    # nanoGPT's weight tying: an Embedding whose table is the LM head's weight (one tensor read by
    # a Gather and a MatMul). torch 2.x's optimiser folds the head's transpose into an initializer
    # of its own; GraphPipe gives each reader a copy and ties them (model.param_ties).
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(20, 8)
        self.fc = torch.nn.Linear(8, 8)
        self.lm_head = torch.nn.Linear(8, 20, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, ids):
        return self.lm_head(torch.relu(self.fc(self.wte(ids))))


class Buffers(torch.nn.Module):
    # Registered buffers in arithmetic (an additive mask, a fixed scale table, as attention masks
    # and RoPE caches are kept): constants, never trained. torch 2.x marks them in the nodes'
    # metadata; the legacy exporter does not (graphpipe-plan import --freeze names them).
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, 4)
        self.register_buffer("mask", torch.linspace(-1.0, 1.0, 8))
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 8))

    def forward(self, x):
        return self.out(torch.relu((self.fc(x) + self.mask) * self.scale))


class Upsample(torch.nn.Module):
    # A decoder's upsampling: ConvTranspose2d with stride 2 (output_padding 1), nn.Upsample
    # bilinear with align_corners to a given size, nn.Upsample nearest by 2, and a conv.
    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
        self.bilinear = torch.nn.Upsample(size=(9, 11), mode="bilinear", align_corners=True)
        self.nearest = torch.nn.Upsample(scale_factor=2, mode="nearest")
        self.conv = torch.nn.Conv2d(4, 2, 3, padding=1)

    def forward(self, x):
        return self.conv(self.nearest(self.bilinear(torch.relu(self.up(x)))))


class SoftmaxAxes(torch.nn.Module):
    # Softmax and log_softmax over an inner axis (dim=1 of [batch, 4, 6]) and the last, and a
    # LayerNorm over the two trailing axes.
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)
        self.norm = torch.nn.LayerNorm([4, 6])

    def forward(self, x):
        h = self.fc(x)
        mixed = torch.softmax(h, dim=1) + torch.log_softmax(h, dim=1) + torch.log_softmax(h, dim=-1)
        return self.norm(mixed)


class TimmQKV(torch.nn.Module):
    # timm's Attention: one qkv Linear viewed as [B, N, 3, heads, d] and permuted to
    # [3, B, heads, N, d] (the batch at axis 1), unbind(0) into q, k and v (the batch first
    # again), scores, softmax, context, heads merged back and the output projection.
    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


class SeqFirst(torch.nn.Module):
    # Sequence-first code (nn.Transformer's default layout): x.transpose(0, 1) to [S, B, E], a
    # Linear, a mean over the sequence (axis 0, before the batch) subtracted, a LayerNorm, and
    # the batch moved first again.
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.out = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.fc(x.transpose(0, 1)))
        h = self.norm(h - h.mean(dim=0, keepdim=True))
        return self.out(h.transpose(0, 1))


class SeqFirstAttention(torch.nn.Module):
    # nn.MultiheadAttention in its default sequence-first layout on a sequence-first activation
    # (a Linear after the transpose, so that neither attention pattern fuses it): q, k and v
    # viewed as [S, B * heads, d] (the heads folded into the batch), moved to [B * heads, S, d],
    # the context viewed as [S * B, E] for the output projection. Biases drawn at random (torch's
    # are zero, and the dynamo optimiser drops a zero bias).
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.attn = torch.nn.MultiheadAttention(8, 2)
        with torch.no_grad():
            self.attn.in_proj_bias.normal_(0, 0.1)
            self.attn.out_proj.bias.normal_(0, 0.1)

    def forward(self, x):
        s = self.fc(x.transpose(0, 1))
        return self.attn(s, s, s, need_weights=False)[0].transpose(0, 1)


class WindowFold(torch.nn.Module):
    # Swin's window partition: [B, H, W, C] viewed as windows and permuted, then .view(-1, ws*ws,
    # C) folds the windows into the batch; a Linear and dot-product attention within each window;
    # window_reverse unfolds them (with the batch size read from the input, as a tensor).
    def __init__(self, res=4, ws=2, dim=6):
        super().__init__()
        self.res, self.ws = res, ws
        self.fc = torch.nn.Linear(dim, dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):
        B, L, C = x.shape
        r, ws = self.res, self.ws
        w = x.view(B, r // ws, ws, r // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)
        h = self.fc(w)
        a = torch.softmax(h @ h.transpose(1, 2) * C ** -0.5, dim=-1) @ h
        y = a.view(B, r // ws, r // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(B, L, C)
        return self.out(y + x)


class WindowTraced(WindowFold):
    # Swin's own window_reverse: B = int(windows.shape[0] / (H * W / ws / ws)) is a Python int,
    # so the legacy exporter bakes the traced batch size into the Reshape targets.
    def forward(self, x):
        B, L, C = x.shape
        r, ws = self.res, self.ws
        w = x.view(B, r // ws, ws, r // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)
        h = self.fc(w)
        a = torch.softmax(h @ h.transpose(1, 2) * C ** -0.5, dim=-1) @ h
        b = int(a.shape[0] / (r * r / ws / ws))
        y = a.view(b, r // ws, r // ws, ws, ws, -1).permute(0, 1, 3, 2, 4, 5).contiguous()
        return self.out(y.view(b, r, r, -1).view(B, L, C) + x)


class SlicedBags(torch.nn.Module):
    # EmbeddingBags over slices of one [batch, tables, bag] ids tensor (facebookresearch DLRM's
    # `emb(ids[:, k])`, TorchRec-style inputs): each bag's Loop reads ids[:, k], not an input.
    def __init__(self):
        super().__init__()
        self.bags = torch.nn.ModuleList(torch.nn.EmbeddingBag(20, 6, mode="sum") for _ in range(2))
        self.fc = torch.nn.Linear(12, 2)

    def forward(self, ids):
        return self.fc(torch.cat([bag(ids[:, k]) for k, bag in enumerate(self.bags)], dim=1))


class DotInteraction(torch.nn.Module):
    # facebookresearch DLRM's "dot" interaction: features viewed as [B, n, d], their pairwise
    # dot products Z = bmm(T, T^T), the strict lower triangle Z[:, li, lj] by advanced indexing
    # with constant index vectors, concatenated with the first feature for the top MLP.
    def __init__(self, n=4, d=4):
        super().__init__()
        self.d = d
        self.bottom = torch.nn.Linear(8, n * d)
        self.top = torch.nn.Linear(d + n * (n - 1) // 2, 2)

    def forward(self, x):
        t = torch.relu(self.bottom(x)).view((x.shape[0], -1, self.d))
        z = torch.bmm(t, torch.transpose(t, 1, 2))
        _, ni, nj = z.shape
        li = torch.tensor([i for i in range(ni) for j in range(i)])
        lj = torch.tensor([j for i in range(nj) for j in range(i)])
        return self.top(torch.cat([t[:, 0], z[:, li, lj]], dim=1))


class LstmStack(torch.nn.Module):
    # nn.LSTM with two bidirectional layers over [batch, 5, 8]: the last step's output, the last
    # layer's final h and the first layer's final c (Y, Y_h and Y_c of the ONNX LSTMs).
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(8, 6, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x):
        y, (h, c) = self.rnn(x)
        return torch.cat([y[:, -1], h[-1], c[0]], dim=1)


class GruLayer(torch.nn.Module):
    # nn.GRU (linear_before_reset in ONNX): the first step's output and the final h.
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(8, 6, batch_first=True)

    def forward(self, x):
        y, h = self.rnn(x)
        return torch.cat([y[:, 0], h[-1]], dim=1)


class CrossAttention(torch.nn.Module):
    # A decoder's attention, as nn.TransformerDecoderLayer computes it: causal self-attention
    # (nn.Transformer.generate_square_subsequent_mask, a float -inf mask added to the scores),
    # then cross-attention over a memory of another length. For cross-attention torch slices the
    # packed in_proj_weight [3E, E] and in_proj_bias into q ([:E]) and k, v ([E:]); the legacy
    # exporter writes those Slice nodes on the initializers, with bounds computed from shapes.
    # Biases drawn at random (torch's are zero, and the dynamo optimiser drops a zero bias).
    def __init__(self):
        super().__init__()
        self.self_attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.cross = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        with torch.no_grad():
            for attn in (self.self_attn, self.cross):
                attn.in_proj_bias.normal_(0, 0.1)
                attn.out_proj.bias.normal_(0, 0.1)

    def forward(self, x, memory):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.size(1))
        y = self.self_attn(x, x, x, attn_mask=mask, need_weights=False)[0]
        return self.cross(y, memory, memory, need_weights=False)[0]


class WeightViews(torch.nn.Module):
    # Trained weights read through data movement only: Swin's relative position bias (a table
    # gathered by a registered index buffer, viewed and permuted) added to the attention scores
    # of shifted windows (torch.roll), and a per-channel scale and shift written as weight[:, None]
    # and bias.view(1, -1, 1), as timm's LayerNorm2d and ConvNeXt write them.
    def __init__(self, res=4, ws=2, dim=6, heads=2):
        super().__init__()
        self.res, self.ws, self.heads = res, ws, heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        self.table = torch.nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.5)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij"))
        coords = coords.flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (ws - 1)
        self.register_buffer("relative_position_index",
                             rel[:, :, 0] * (2 * ws - 1) + rel[:, :, 1])
        self.scale = torch.nn.Parameter(torch.randn(dim) * 0.5 + 1)
        self.shift = torch.nn.Parameter(torch.randn(dim) * 0.1)

    def forward(self, x):
        B, L, C = x.shape
        r, ws, h, n = self.res, self.ws, self.heads, self.ws * self.ws
        s = torch.roll(x.view(B, r, r, C), shifts=(-1, -1), dims=(1, 2))
        w = s.view(B, r // ws, ws, r // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, n, C)
        qkv = self.qkv(w).reshape(-1, n, 3, h, C // h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        bias = self.table[self.relative_position_index.view(-1)].view(n, n, -1)
        bias = bias.permute(2, 0, 1).contiguous()
        a = torch.softmax(q @ k.transpose(-2, -1) * (C // h) ** -0.5 + bias.unsqueeze(0), dim=-1)
        o = (a @ v).transpose(1, 2).reshape(-1, n, C)
        y = o.view(B, r // ws, r // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(B, r, r, C)
        y = self.out(torch.roll(y, shifts=(1, 1), dims=(1, 2)).reshape(B, L, C) + x)
        z = y.transpose(1, 2) * self.scale[:, None] + self.shift.view(1, -1, 1)
        return z.transpose(1, 2)


class LibraryVision(torch.nn.Module):
    # What torchvision's MobileNetV3, Swin and ConvNeXt heads export: Hardswish and a
    # squeeze-excite gate of Hardsigmoid, F.pad to a window multiple that pads nothing, the
    # shifted-window mask written by slice assignment into x.new_zeros (ScatterND of constants),
    # PatchMerging's x[..., 0::2, 0::2, :] (slices with steps on two axes), and
    # AdaptiveAvgPool2d(1) of a permuted tensor (dynamo's as_strided).
    def __init__(self, c=6, res=4, ws=2):
        super().__init__()
        self.res, self.ws = res, ws
        self.conv = torch.nn.Conv2d(3, c, 3, padding=1)
        self.act = torch.nn.Hardswish()
        self.se = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Conv2d(c, c, 1),
                                      torch.nn.Hardsigmoid())
        self.proj = torch.nn.Linear(c, c)
        self.merge = torch.nn.Linear(4 * c, 2 * c)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        h = self.act(self.conv(x))
        h = h * self.se(h)
        t = h.permute(0, 2, 3, 1)  # [B, H, W, C]
        pad_h = (self.ws - t.shape[1] % self.ws) % self.ws
        t = torch.nn.functional.pad(t, (0, 0, 0, pad_h, 0, pad_h))
        mask = t.new_zeros((self.res, self.res))
        count = 0
        for hs in (slice(0, -self.ws), slice(-self.ws, -1), slice(-1, None)):
            for wsl in (slice(0, -self.ws), slice(-self.ws, -1), slice(-1, None)):
                mask[hs, wsl] = count
                count += 1
        t = self.proj(t) + (mask == 4).to(t.dtype)[None, :, :, None]
        x0, x1 = t[..., 0::2, 0::2, :], t[..., 1::2, 0::2, :]
        x2, x3 = t[..., 0::2, 1::2, :], t[..., 1::2, 1::2, :]
        m = self.merge(torch.cat([x0, x1, x2, x3], -1))  # [B, H/2, W/2, 2C]
        return torch.flatten(self.pool(m.permute(0, 3, 1, 2)), 1)


class LibraryAttention(torch.nn.Module):
    # Attention as libraries write it beside nn.MultiheadAttention: torch.einsum scores and
    # mixing (MaxViT, lucidrains), F.scaled_dot_product_attention with a boolean mask (Hugging
    # Face's sdpa path; dynamo zeroes the rows a mask empties with IsNaN and Where), and token
    # types read from a registered buffer by torch.gather at the positions (Hugging Face's BERT,
    # GatherElements of constants).
    def __init__(self, dim=8, heads=2, seq=5):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        self.types = torch.nn.Embedding(2, dim)
        self.register_buffer("token_type_ids", torch.zeros(1, 16, dtype=torch.long))
        self.register_buffer("position_ids", torch.arange(16).expand(1, -1))
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x):
        B, S, C = x.shape
        pos = self.position_ids[:, :S]
        types = torch.gather(self.token_type_ids.expand(pos.shape[0], -1), 1, pos)
        x = x + self.types(types.expand(B, S))
        q, k, v = self.qkv(x).reshape(B, S, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.einsum("bhid,bhjd->bhij", q, k) * (C // self.heads) ** -0.5
        o = torch.einsum("bhij,bhjd->bhid", a.softmax(-1), v)
        o = o + torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=self.causal)
        return self.out(o.transpose(1, 2).reshape(B, S, C))


class GroupNorms(torch.nn.Module):
    # nn.GroupNorm (diffusion U-Nets, PoolFormer) and nn.InstanceNorm2d: both exporters lower them
    # to InstanceNormalization over [batch, groups, -1] with a constant scale and bias, the
    # GroupNorm weight and bias after it (dynamo casts them like the activation: CastLike).
    def __init__(self, c=6):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, c, 3, padding=1)
        self.group = torch.nn.GroupNorm(2, c)
        self.instance = torch.nn.InstanceNorm2d(c)
        self.one_group = torch.nn.GroupNorm(1, c)

    def forward(self, x):
        h = torch.nn.functional.silu(self.group(self.conv(x)))
        return self.one_group(self.instance(h) + h)


class AttentionMask(torch.nn.Module):
    # BERT as Hugging Face writes it: token, position (arange expanded over the batch) and
    # token-type embeddings, and an int64 attention_mask turned into an additive bias with
    # (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min.
    def __init__(self, vocab=20, seq=5, dim=8, heads=2):
        super().__init__()
        self.heads = heads
        self.word = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(seq, dim)
        self.kind = torch.nn.Embedding(2, dim)
        self.query = torch.nn.Linear(dim, dim)
        self.key = torch.nn.Linear(dim, dim)
        self.value = torch.nn.Linear(dim, dim)
        self.out = torch.nn.Linear(dim, dim)

    def heads_first(self, t):  # transpose_for_scores
        return t.view(t.size()[:-1] + (self.heads, -1)).permute(0, 2, 1, 3)

    def forward(self, input_ids, attention_mask, token_type_ids):
        B, S = input_ids.shape
        pos = torch.arange(S, device=input_ids.device).expand(B, -1)
        x = self.word(input_ids) + self.pos(pos) + self.kind(token_type_ids)
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        q, k, v = (self.heads_first(f(x)) for f in (self.query, self.key, self.value))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + bias
        y = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        return self.out(y.view(B, S, -1))


class BatchConstants(torch.nn.Module):
    # Values computed from the batch size, the same for every sample: OPT's position ids (a
    # cumulative sum of the attention mask it makes as ones(batch, T)) read from a learned
    # table, and BLOOM's ALiBi (per-head slopes times the key positions, repeated over the
    # batch for scores with the heads folded into it, added by baddbmm).
    def __init__(self, dim=8, heads=2, seq=5):
        super().__init__()
        self.heads = heads
        self.positions = torch.nn.Embedding(seq + 2, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):
        B, S, C = x.shape
        mask = torch.ones(B, S, dtype=torch.long)
        pos = (torch.cumsum(mask, dim=1) * mask - 1).long() + 2
        x = x + self.positions(pos)
        D = C // self.heads
        q, k, v = (t.reshape(B, S, self.heads, D).transpose(1, 2).reshape(B * self.heads, S, D)
                   for t in self.qkv(x).chunk(3, dim=-1))
        slopes = torch.pow(torch.tensor(0.25), torch.arange(1, self.heads + 1))  # as BLOOM's
        alibi = (slopes[:, None, None] * torch.arange(S)).repeat(B, 1, 1)
        scores = torch.baddbmm(alibi, q, k.transpose(1, 2), beta=1.0, alpha=D ** -0.5)
        o = torch.bmm(scores.softmax(-1), v).reshape(B, self.heads, S, D).transpose(1, 2)
        return self.out(o.reshape(B, S, C))


class ZeroBiases(torch.nn.Module):
    # Linears whose biases start at zero (as Hugging Face initialises them): torch's ONNX
    # optimiser drops such a bias from the Gemm, and it must train from zero all the same.
    def __init__(self, dim=8):
        super().__init__()
        self.a = torch.nn.Linear(dim, dim)
        self.b = torch.nn.Linear(dim, dim)
        self.c = torch.nn.Linear(dim, dim)
        torch.nn.init.zeros_(self.a.bias)
        torch.nn.init.zeros_(self.b.bias)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


class ScaledBlock(torch.nn.Module):
    # ConvNeXt's and PoolFormer's block: a GroupNorm (which torch decomposes, reshaping its
    # affine parameters) and a layer scale read as gamma.view(1, 1, -1); both blocks start with
    # equal values, so the optimiser merges what it folds from them.
    def __init__(self, dim):
        super().__init__()
        self.norm = torch.nn.GroupNorm(1, dim)
        self.fc = torch.nn.Linear(dim, dim)
        self.gamma = torch.nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x):
        y = self.fc(self.norm(x.transpose(1, 2)).transpose(1, 2))
        return x + y * self.gamma.view(1, 1, -1)


class OptimiserFolds(torch.nn.Module):
    # What torch's ONNX optimiser folds parameters and buffers into: two ScaledBlocks; an
    # ALBERT-style layer applied twice whose LayerNorm (capitalised, as Hugging Face names it)
    # starts equal to another norm's; rotary-style cosines computed from a buffer (a constant,
    # never trained).
    def __init__(self, dim=8):
        super().__init__()
        self.blocks = torch.nn.ModuleList([ScaledBlock(dim) for _ in range(2)])
        self.shared = torch.nn.Linear(dim, dim)
        self.LayerNorm = torch.nn.LayerNorm(dim)
        self.final_norm = torch.nn.LayerNorm(dim)
        self.register_buffer("inv_freq", 1.0 / 10.0 ** (torch.arange(0, dim, 2).float() / dim))

    def forward(self, x):
        freqs = torch.arange(x.shape[1], dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        x = x * torch.cat([freqs.cos(), freqs.cos()], dim=-1)
        for _ in range(2):
            x = self.LayerNorm(x + torch.tanh(self.shared(x)))
        for block in self.blocks:
            x = block(x)
        return self.final_norm(x)


class RelativeBias(torch.nn.Module):
    # Swin's relative position bias: a learned table read through a buffer of indices that
    # repeat (all pairs of positions at one offset read one entry, and torch sums their
    # gradients into it).
    def __init__(self, dim=8, heads=2, seq=5):
        super().__init__()
        self.heads = heads
        self.table = torch.nn.Parameter(torch.randn(2 * seq - 1, heads) * 0.5)
        offsets = torch.arange(seq)[:, None] - torch.arange(seq)[None, :] + seq - 1
        self.register_buffer("relative_index", offsets.flatten())
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):
        B, S, C = x.shape
        bias = self.table[self.relative_index].view(S, S, -1).permute(2, 0, 1).unsqueeze(0)
        q, k, v = (t.reshape(B, S, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        scores = q @ k.transpose(-1, -2) * (C // self.heads) ** -0.5 + bias
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, C)
        return self.out(y)


class RotarySplit(torch.nn.Module):
    # GPT-J's rotary embedding: a sinusoid table (a plain tensor attribute, as GPT-J keeps it, so
    # both exporters write a constant), its rows at the positions split into sine and cosine,
    # each repeated per pair of features, and every other feature rotated.
    def __init__(self, dim=8, positions=16):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.arange(positions).float()[:, None] * inv_freq[None, :]
        self.embed_positions = torch.cat([angles.sin(), angles.cos()], dim=1)
        self.fc = torch.nn.Linear(dim, dim)

    def forward(self, x):
        positions = torch.arange(x.shape[1])
        sin, cos = torch.split(self.embed_positions[positions], x.shape[-1] // 2, dim=-1)
        sin = torch.repeat_interleave(sin, 2, dim=-1)
        cos = torch.repeat_interleave(cos, 2, dim=-1)
        h = self.fc(x)
        # (GPT-J writes stack(..., dim=-1).flatten(-2): with a dynamic batch, the legacy exporter
        # loses the stacked tensor's rank and writes a Reshape onnxruntime cannot run.)
        rotated = torch.stack((-h[:, :, 1::2], h[:, :, ::2]), dim=3).reshape(h.shape)
        return h * cos + rotated * sin


class PaddedPositions(torch.nn.Module):
    # RoBERTa's embeddings: position ids count the ids that are not padding along the sequence
    # (a CumSum of the padding mask, integer arithmetic on the ids), padding at the padding index;
    # neither table trains its padding row. Token types gathered from a zero buffer at those
    # position ids, as Hugging Face's RoBERTa does without token_type_ids.
    def __init__(self, vocab=20, dim=8, pad=1, positions=12):
        super().__init__()
        self.pad = pad
        self.words = torch.nn.Embedding(vocab, dim, padding_idx=pad)
        self.positions = torch.nn.Embedding(positions, dim, padding_idx=pad)
        self.types = torch.nn.Embedding(2, dim)
        self.register_buffer("token_type_ids", torch.zeros(1, positions, dtype=torch.long),
                             persistent=False)
        self.fc = torch.nn.Linear(dim, dim)

    def forward(self, ids):
        mask = ids.ne(self.pad).int()
        position_ids = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.pad
        types = torch.gather(self.token_type_ids.expand(position_ids.shape[0], -1), 1,
                             position_ids).expand(ids.shape[0], ids.shape[1])
        return self.fc(self.words(ids) + self.positions(position_ids) + self.types(types))


class AudioFrontEnd(torch.nn.Module):
    # Whisper's front end: two nn.Conv1d over mel frames (the second of stride 2, one grouped
    # as wav2vec's positional convolution is), GELU between, then tokens of the frames.
    def __init__(self, mels=4, dim=8):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(mels, dim, kernel_size=3, padding=1)
        self.conv2 = torch.nn.Conv1d(dim, dim, kernel_size=3, stride=2, padding=1, groups=2)
        self.fc = torch.nn.Linear(dim, dim)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.conv2(torch.nn.functional.gelu(self.conv1(x))))
        return self.fc(h.permute(0, 2, 1))


class NormAffines(torch.nn.Module):
    # LayerNorms without torch's full affine: MPT's LayerNorm(bias=False) (the legacy exporter
    # writes a Constant of zeros as its bias), one with elementwise_affine=False (ones and zeros;
    # dynamo's optimiser reuses another norm's all-ones weight for its scale), an ordinary one,
    # and F.layer_norm with a registered buffer as its scale and a parameter as its shift.
    def __init__(self, dim=8):
        super().__init__()
        self.fc1 = torch.nn.Linear(dim, dim)
        self.no_bias = torch.nn.LayerNorm(dim, bias=False)
        self.fc2 = torch.nn.Linear(dim, dim)
        self.no_affine = torch.nn.LayerNorm(dim, elementwise_affine=False)
        self.fc3 = torch.nn.Linear(dim, dim)
        self.full = torch.nn.LayerNorm(dim)
        self.register_buffer("fixed_scale", torch.linspace(0.5, 1.5, dim))
        self.shift = torch.nn.Parameter(torch.linspace(-0.2, 0.2, dim))
        self.dim = dim

    def forward(self, x):
        h = self.no_bias(self.fc1(x))
        h = self.no_affine(self.fc2(torch.nn.functional.gelu(h)))
        h = self.full(self.fc3(h))
        return torch.nn.functional.layer_norm(h, (self.dim,), self.fixed_scale, self.shift)


class EosPooling(torch.nn.Module):
    # CLIP's text pooling: the state at each sample's argmax position, h[arange(B), ids.argmax(-1)]
    # (the first CLIP checkpoints: the largest id is the end of text; ties take the first) and
    # h[arange(B), (ids == eos).int().argmax(-1)] (later ones).
    def __init__(self, vocab=40, dim=8):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.fc = torch.nn.Linear(dim, dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, ids):
        h = torch.tanh(self.fc(self.emb(ids)))
        rows = torch.arange(h.shape[0], device=h.device)
        largest = h[rows, ids.to(torch.int).argmax(dim=-1)]
        eos = h[rows, (ids == 3).int().argmax(dim=-1)]
        return self.out(largest + eos)


class CosineWindows(torch.nn.Module):
    # torchvision's Swin V2 attention within windows folded into the batch: the key third of a
    # copy of the qkv bias zeroed by slice assignment, cosine attention (F.normalize of q and k,
    # whose norm is expanded over the folded windows) scaled by clamp(logit_scale, max=log 100)
    # .exp() of a per-head [heads, 1, 1] parameter.
    def __init__(self, res=4, ws=2, dim=8, heads=2):
        super().__init__()
        self.res, self.ws, self.heads = res, ws, heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.logit_scale = torch.nn.Parameter(torch.log(10 * torch.ones((heads, 1, 1))))
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        B, L, C = x.shape
        r, ws, h = self.res, self.ws, self.heads
        w = x.view(B, r // ws, ws, r // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)
        bias = self.qkv.bias.clone()
        bias[C:2 * C].zero_()
        qkv = torch.nn.functional.linear(w, self.qkv.weight, bias)
        qkv = qkv.reshape(w.shape[0], ws * ws, 3, h, C // h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(
            k, dim=-1).transpose(-2, -1)
        attn = attn * torch.clamp(self.logit_scale, max=math.log(100.0)).exp()
        a = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(w.shape[0], ws * ws, C)
        y = a.view(B, r // ws, r // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(B, L, C)
        return self.proj(y + x)


class TokenBatchNorm(torch.nn.Module):
    # timm's LeViT: a linear whose BatchNorm1d runs over the tokens folded into the batch
    # (bn(x.flatten(0, 1)).reshape_as(x)), and attention biases per head read at a registered
    # index buffer along their second axis (attention_biases[:, idxs]).
    def __init__(self, tokens=4, dim=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qk = torch.nn.Linear(dim, 2 * dim, bias=False)
        self.bn = torch.nn.BatchNorm1d(2 * dim)
        self.attention_biases = torch.nn.Parameter(torch.linspace(-0.5, 0.5, heads * 3).view(heads, 3))
        idx = torch.tensor([[abs(i - j) for j in range(tokens)] for i in range(tokens)]).clamp(max=2)
        self.register_buffer("attention_bias_idxs", idx, persistent=False)
        self.out = torch.nn.Linear(tokens, dim)

    def forward(self, x):
        B, N, C = x.shape
        qk = self.bn(self.qk(x).flatten(0, 1)).reshape(B, N, 2 * C)
        q, k = qk.view(B, N, self.heads, -1).permute(0, 2, 1, 3).chunk(2, dim=-1)
        attn = q @ k.transpose(-2, -1) + self.attention_biases[:, self.attention_bias_idxs]
        return self.out(attn.softmax(dim=-1).mean(dim=1))


class TrainedScalars(torch.nn.Module):
    # Scalar parameters: a learned temperature read by several ops (a factor, the argument of
    # exp, a bias and a divisor: one parameter whose gradients add up), ReZero's residual gate
    # alpha * f(x), and a one-element vector read as a subtrahend and a divisor.
    def __init__(self, dim=8):
        super().__init__()
        self.a = torch.nn.Linear(dim, dim)
        self.b = torch.nn.Linear(dim, dim)
        self.temp = torch.nn.Parameter(torch.tensor(0.7))
        self.alpha = torch.nn.Parameter(torch.tensor(0.1))
        self.tau = torch.nn.Parameter(torch.tensor([2.0]))

    def forward(self, x):
        h = self.a(x) * self.temp
        g = torch.tanh(self.b(x)) * self.temp.exp()
        r = x + self.alpha * torch.relu(h)
        return (h + g + self.temp) / self.temp + r / self.tau - self.tau


class PositionBiasMlp(torch.nn.Module):
    # torchvision's Swin V2 continuous position bias: a registered table of log-spaced relative
    # coordinates through an MLP (Linear, ReLU, Linear without bias), viewed per head, gathered
    # at a registered relative position index, permuted to [heads, N, N] and 16 * sigmoid of it
    # added to the attention scores of a window of N = ws * ws tokens.
    def __init__(self, ws=2, dim=8, heads=2):
        super().__init__()
        self.heads, self.n = heads, ws * ws
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.cpb_mlp = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(inplace=True),
                                           torch.nn.Linear(16, heads, bias=False))
        r = torch.arange(-(ws - 1), ws, dtype=torch.float32)
        table = torch.stack(torch.meshgrid([r, r], indexing="ij")).permute(1, 2, 0)
        table = table.unsqueeze(0) / (ws - 1) * 8
        table = torch.sign(table) * torch.log2(torch.abs(table) + 1.0) / 3.0
        self.register_buffer("relative_coords_table", table)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij"))
        coords = torch.flatten(coords, 1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (ws - 1)
        index = (rel[:, :, 0] * (2 * ws - 1) + rel[:, :, 1]).flatten()
        self.register_buffer("relative_position_index", index)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(
            2, 0, 3, 1, 4)
        bias = self.cpb_mlp(self.relative_coords_table).view(-1, self.heads)
        bias = bias[self.relative_position_index].view(self.n, self.n, -1)
        bias = 16 * torch.sigmoid(bias.permute(2, 0, 1).contiguous())
        attn = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5 + bias.unsqueeze(0)
        out = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(out)


class InterpolatedBias(torch.nn.Module):
    # BEiT's relative position bias: the table's window rows viewed as an image, interpolated
    # (bilinear) to the window size (its own size here, as for the resolution it was made for),
    # joined again with the three class-token rows, gathered at a registered relative position
    # index and added to the attention scores; and a second table whose two halves reach two
    # element-wise ops apart (two maps of one weight, tied).
    def __init__(self, ws=2, dim=8, heads=2):
        super().__init__()
        self.heads, self.ws, self.n = heads, ws, ws * ws
        size = (2 * ws - 1) ** 2
        self.table = torch.nn.Parameter(torch.linspace(-1.0, 1.0, (size + 3) * heads).view(
            size + 3, heads))
        self.halves = torch.nn.Parameter(torch.linspace(0.5, 1.5, 2 * dim).view(2, dim))
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij"))
        coords = torch.flatten(coords, 1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (ws - 1)
        index = (rel[:, :, 0] * (2 * ws - 1) + rel[:, :, 1]).flatten()
        self.register_buffer("relative_position_index", index, persistent=False)

    def forward(self, x):
        b, n, c = x.shape
        side = 2 * self.ws - 1
        grid = self.table[:side * side].reshape(1, side, side, -1).permute(0, 3, 1, 2)
        grid = torch.nn.functional.interpolate(grid, size=(side, side), mode="bilinear",
                                               align_corners=False)
        rows = torch.cat([grid.permute(0, 2, 3, 1).reshape(side * side, -1),
                          self.table[side * side:]])
        bias = rows[self.relative_position_index].view(n, n, -1).permute(2, 0, 1).unsqueeze(0)
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(
            2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5 + bias
        out = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(out) * self.halves[0].view(1, 1, -1) + self.halves[1].view(1, 1, -1)


class TrigramPad(torch.nn.Module):
    # MobileBERT's trigram input: each token beside its neighbours, the sequence shifted by one
    # each way with F.pad of zeros (and of a constant on a channel axis), into a linear layer.
    def __init__(self, dim=8):
        super().__init__()
        self.fc = torch.nn.Linear(3 * dim + 2, dim)

    def forward(self, x):
        nxt = torch.nn.functional.pad(x[:, 1:], [0, 0, 0, 1], value=0.0)
        prev = torch.nn.functional.pad(x[:, :-1], [0, 0, 1, 0], value=0.0)
        both = torch.nn.functional.pad(torch.cat([nxt, x, prev], dim=2), [1, 1], value=0.25)
        return self.fc(both)


class ShiftedIds(torch.nn.Module):
    # BART's decoder inputs (transformers' shift_tokens_right): the ids moved one place right by
    # slice assignment into a fresh zeros tensor, the first set to the start id, -100 (the label
    # padding) replaced by the padding id; mBART's, the first set to each sample's last token
    # (torch.gather at a computed position); and slice assignments of activations, whose
    # gradient reaches only the elements not overwritten.
    def __init__(self, vocab=40, dim=8):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.fc = torch.nn.Linear(dim, dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, ids):
        shifted = ids.new_zeros(ids.shape)
        shifted[:, 1:] = ids[:, :-1].clone()
        shifted[:, 0] = 2
        shifted.masked_fill_(shifted == -100, 1)
        # mBART's: each sample's last token before its padding (id 1) starts its decoder ids.
        last = (ids.ne(1).sum(dim=1) - 1).unsqueeze(-1)
        rotated = ids.clone()
        rotated[:, 1:] = ids[:, :-1].clone()
        rotated[:, 0] = ids.gather(1, last).squeeze()
        shifted = shifted + rotated
        h = torch.tanh(self.fc(self.emb(shifted)))
        prev = torch.zeros_like(h)
        prev[:, 1:] = h[:, :-1]
        mixed = h.clone()
        mixed[:, 2] = h[:, 3] * 2.0
        return self.out(prev + mixed)


def padded_ids_inputs(g):
    ids = torch.randint(2, 20, (patterns.BATCH, 5), generator=g)
    ids[0, 3:] = 1  # padded at the end, and a padding id inside another sample
    ids[2, 1] = 1
    return [("ids", ids)]


def attention_mask_inputs(g):
    ids = torch.randint(0, 20, (patterns.BATCH, 5), generator=g)
    mask = torch.ones(patterns.BATCH, 5, dtype=torch.long)
    mask[:, 3:] = 0
    mask[0, 4] = 1
    kinds = torch.zeros(patterns.BATCH, 5, dtype=torch.long)
    kinds[:, 2:] = 1
    return [("input_ids", ids), ("attention_mask", mask), ("token_type_ids", kinds)]


def cross_attention_inputs(g):
    return [("x", torch.randn(patterns.BATCH, 5, 8, generator=g)),
            ("memory", torch.randn(patterns.BATCH, 6, 8, generator=g))]


def sliced_bag_inputs(g):
    return [("ids", torch.randint(0, 20, (patterns.BATCH, 2, 3), generator=g))]


def two_bag_inputs(g):
    return [("ids0", torch.randint(0, 20, (patterns.BATCH, 3), generator=g)),
            ("ids1", torch.randint(0, 30, (patterns.BATCH, 3), generator=g))]


# The patterns of ../torch, and those only torch 2.x needs.
PATTERNS = patterns.PATTERNS + [("two_norms", 121, TwoNorms, patterns.feat(32), None),
                                ("encoder_stack", 122, EncoderStack, patterns.feat(6, 16), None),
                                ("class_token", 123, ClassToken, patterns.feat(3, 8, 8), None),
                                ("mha_nobias", 124, AttentionNoBias, patterns.feat(5, 8), None),
                                ("embedding_bag_sum", 125, lambda: EmbeddingBagFixed("sum"),
                                 patterns.ids_input(3), None),
                                ("embedding_bag_mean", 126, lambda: EmbeddingBagFixed("mean"),
                                 patterns.ids_input(3), None),
                                ("two_bags", 127, TwoBags, two_bag_inputs, None),
                                ("rms_norm", 128, RMSNorm, patterns.feat(5, 8), None),
                                ("swiglu", 129, SwiGLU, patterns.feat(5, 8), None),
                                ("causal_mask", 130, CausalMask, patterns.feat(5, 8), None),
                                ("broadcast_math", 131, BroadcastMath, patterns.feat(3, 6), None),
                                ("tied_head", 132, TiedHead, patterns.ids_input(5), None),
                                ("upsample", 133, Upsample, patterns.feat(3, 3, 3), None),
                                ("softmax_axes", 134, SoftmaxAxes, patterns.feat(4, 6), None),
                                ("timm_qkv", 135, TimmQKV, patterns.feat(5, 8), None),
                                ("seq_first", 136, SeqFirst, patterns.feat(5, 8), None),
                                ("window_fold", 137, WindowFold, patterns.feat(16, 6), None),
                                ("seq_first_attention", 139, SeqFirstAttention, patterns.feat(5, 8),
                                 None),
                                ("buffers", 138, Buffers, patterns.feat(8), None),
                                ("sliced_bags", 139, SlicedBags, sliced_bag_inputs, None),
                                ("dot_interaction_index", 140, DotInteraction, patterns.feat(8),
                                 None),
                                ("lstm_stack", 141, LstmStack, patterns.feat(5, 8), None),
                                ("gru_layer", 142, GruLayer, patterns.feat(5, 8), None),
                                ("cross_attention", 143, CrossAttention, cross_attention_inputs,
                                 None),
                                ("window_traced", 144, WindowTraced, patterns.feat(16, 6), None),
                                ("weight_views", 145, WeightViews, patterns.feat(16, 6), None),
                                ("attention_mask", 146, AttentionMask, attention_mask_inputs,
                                 None),
                                ("library_vision", 147, LibraryVision, patterns.feat(3, 4, 4),
                                 None),
                                ("library_attention", 148, LibraryAttention, patterns.feat(5, 8),
                                 None),
                                ("group_norm", 149, GroupNorms, patterns.feat(3, 4, 4), None),
                                ("batch_constants", 150, BatchConstants, patterns.feat(5, 8),
                                 None),
                                ("zero_biases", 151, ZeroBiases, patterns.feat(8), None),
                                ("optimiser_folds", 152, OptimiserFolds, patterns.feat(5, 8),
                                 None),
                                ("relative_bias", 153, RelativeBias, patterns.feat(5, 8), None),
                                ("rotary_split", 154, RotarySplit, patterns.feat(5, 8), None),
                                ("padded_positions", 155, PaddedPositions, padded_ids_inputs,
                                 None),
                                ("audio_front_end", 156, AudioFrontEnd, patterns.feat(4, 10),
                                 None),
                                ("norm_affines", 157, NormAffines, patterns.feat(5, 8), None),
                                ("eos_pooling", 158, EosPooling, patterns.ids_input(6), None),
                                ("cosine_windows", 159, CosineWindows, patterns.feat(16, 8),
                                 None),
                                ("token_batch_norm", 160, TokenBatchNorm, patterns.feat(4, 8),
                                 None),
                                ("trained_scalars", 161, TrainedScalars, patterns.feat(5, 8),
                                 None),
                                ("position_bias_mlp", 162, PositionBiasMlp, patterns.feat(4, 8),
                                 None),
                                ("interpolated_bias", 163, InterpolatedBias, patterns.feat(4, 8),
                                 None),
                                ("trigram_pad", 164, TrigramPad, patterns.feat(5, 8), None),
                                ("shifted_ids", 165, ShiftedIds, padded_ids_inputs, None)]


def main():
    warnings.filterwarnings("ignore")
    os.makedirs(OUT, exist_ok=True)
    prefix = ONLY + "_" if ONLY else ""
    for old in glob.glob(os.path.join(OUT, prefix + "*.onnx")) + glob.glob(os.path.join(OUT, prefix + "*.onnx.data")):
        os.remove(old)
    entries, failures = [], []
    if ONLY:
        with open(os.path.join(OUT, "models.json")) as f:
            entries = [e for e in json.load(f) if e["pattern"] != ONLY]
    for pattern, seed, build, make_inputs, axis_names in PATTERNS:
        if ONLY and pattern != ONLY:
            continue
        pristine, inputs, input_names = patterns.prepared(seed, build, make_inputs)
        for suffix, variant, train, kwargs in VARIANTS:
            stem = f"{pattern}_{suffix}"
            path, dynamic_axes = patterns.export_target(stem, variant == "static", input_names,
                                                        axis_names)
            exported = copy.deepcopy(pristine)
            exported.train(train)
            try:
                torch.onnx.export(exported, tuple(t for _, t in inputs), path, input_names=input_names,
                                  output_names=["y"], dynamic_axes=dynamic_axes, **kwargs)
            except Exception as e:  # recorded, the pattern is skipped for this variant
                failures.append((stem, f"{type(e).__name__}: {e}".splitlines()[0]))
                for f in (path, path + ".data"):
                    if os.path.exists(f):
                        os.remove(f)
                continue
            model = onnx.load(path, load_external_data=False)
            node_types = sorted({n.op_type for n in model.graph.node})
            graph_inputs = [vi.name for vi in model.graph.input]
            data_inputs = [n for n in graph_inputs if n in input_names]
            has_reference = True
            if has_reference:
                patterns.write_references(stem, copy.deepcopy(pristine), inputs, train, data_inputs, seed)
            entries.append({"stem": stem, "pattern": pattern, "opset": model.opset_import[0].version,
                            "variant": variant, "exporter": "dynamo" if kwargs["dynamo"] else "legacy",
                            "external_data": os.path.exists(path + ".data"), "inputs": data_inputs,
                            "graph_inputs": graph_inputs, "has_reference": has_reference,
                            "node_types": node_types, "torch": torch.__version__})
    patterns.report(entries, failures)


if __name__ == "__main__":
    main()
