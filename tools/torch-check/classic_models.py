"""The architectures architectures.py checked before issue 37: torchvision CNNs with random
weights, and recommendation, MLP and transformer models written the way their users write them.
16 models: 14 architectures; DLRM also with nn.Embedding + sum(dim=1) in place of
nn.EmbeddingBag, and with bags of varying length (offsets). Each entry is (name, builder, input
maker); an input maker takes a torch.Generator and returns a list of (name, tensor)."""
import torch
import torch.nn as nn

BATCH = 4


def image(size):
    return lambda g: [("x", torch.randn(BATCH, 3, size, size, generator=g))]


def torchvision_model(name, **kwargs):
    def build():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, num_classes=10, **kwargs)
    return build


class DLRM(nn.Module):
    # Dense features through a bottom MLP, 4 sparse features as fixed-size bags (EmbeddingBag
    # with ids [batch, bag]), pairwise dot-product interactions, top MLP.
    def __init__(self, tables=4, rows=50, dim=16):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, dim), nn.ReLU())
        self.tables = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        pairs = (tables + 1) * tables // 2
        self.top = nn.Sequential(nn.Linear(dim + pairs, 32), nn.ReLU(), nn.Linear(32, 1))

    def bags(self, ids):
        return [t(i) for t, i in zip(self.tables, ids)]

    def forward(self, dense, ids0, ids1, ids2, ids3):
        x = self.bottom(dense)
        return self.interact(x, self.bags((ids0, ids1, ids2, ids3)))

    def interact(self, x, bags):
        feats = [x] + bags
        scores = []
        for a in range(len(feats)):
            for b in range(a + 1, len(feats)):
                scores.append((feats[a] * feats[b]).sum(dim=1, keepdim=True))
        return self.top(torch.cat([x] + scores, dim=1))


class DLRMEmbeddingSum(DLRM):
    # The same model with each bag summed by nn.Embedding + sum(dim=1) (torch 2.x writes it as
    # Gather + ReduceSum, where nn.EmbeddingBag becomes a Loop over the bags).
    def __init__(self):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(50, 16) for _ in range(4))
        del self.tables

    def bags(self, ids):
        return [e(i).sum(dim=1) for e, i in zip(self.embeddings, ids)]


class DLRMOffsets(DLRM):
    # The same model with bags of varying length: each table takes flat ids and the offset of
    # every sample's bag, as DLRM's own data loaders feed nn.EmbeddingBag (imported with
    # --max-bag: every sample's bag padded to that many ids).
    def forward(self, dense, ids0, off0, ids1, off1, ids2, off2, ids3, off3):
        bags = [t(i, o) for t, i, o in zip(self.tables, (ids0, ids1, ids2, ids3),
                                           (off0, off1, off2, off3))]
        return self.interact(self.bottom(dense), bags)


def dlrm_offsets_inputs(g):
    # Bags of 1 to 4 ids (4 samples: one of each length, in a seeded order per table).
    out = [("dense", torch.randn(BATCH, 13, generator=g))]
    for k in range(4):
        lengths = torch.randperm(BATCH, generator=g) + 1
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
        out.append((f"ids{k}", torch.randint(0, 50, (int(lengths.sum()),), generator=g)))
        out.append((f"off{k}", offsets))
    return out


def dlrm_inputs(g):
    ids = [(f"ids{k}", torch.randint(0, 50, (BATCH, 3), generator=g)) for k in range(4)]
    return [("dense", torch.randn(BATCH, 13, generator=g))] + ids


class TwoTower(nn.Module):
    # User and item towers over embeddings, scored by a dot product and a sigmoid.
    def __init__(self):
        super().__init__()
        self.user_emb = nn.Embedding(100, 16)
        self.item_emb = nn.Embedding(200, 16)
        self.user = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
        self.item = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))

    def forward(self, user, item):
        u = self.user(self.user_emb(user))
        v = self.item(self.item_emb(item))
        return torch.sigmoid((u * v).sum(dim=1, keepdim=True))


def two_tower_inputs(g):
    return [("user", torch.randint(0, 100, (BATCH,), generator=g)),
            ("item", torch.randint(0, 200, (BATCH,), generator=g))]


class CandleUno(nn.Module):
    # Three feature branches (cell expression, two drug descriptors), each its own MLP, then a
    # shared MLP on their concatenation.
    def __init__(self):
        super().__init__()
        def tower(n):
            return nn.Sequential(nn.Linear(n, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.cell, self.drug1, self.drug2 = tower(100), tower(80), tower(80)
        self.head = nn.Sequential(nn.Linear(192, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, cell, drug1, drug2):
        return self.head(torch.cat([self.cell(cell), self.drug1(drug1), self.drug2(drug2)], dim=1))


def candle_inputs(g):
    return [(n, torch.randn(BATCH, k, generator=g)) for n, k in (("cell", 100), ("drug1", 80),
                                                                  ("drug2", 80))]


class Bert(nn.Module):
    # Token and learned position embeddings, LayerNorm, an nn.TransformerEncoder (exact GELU),
    # a pooler on the first token, a classifier.
    def __init__(self, vocab=100, seq=8, hidden=32, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Parameter(0.02 * torch.randn(1, seq, hidden))
        self.norm = nn.LayerNorm(hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0,
                                           activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pool = nn.Linear(hidden, hidden)
        self.cls = nn.Linear(hidden, 2)

    def forward(self, ids):
        h = self.encoder(self.norm(self.tok(ids) + self.pos))
        return self.cls(torch.tanh(self.pool(h[:, 0])))


def ids_inputs(g):
    return [("ids", torch.randint(0, 100, (BATCH, 8), generator=g))]


class Encoder(nn.Module):
    # nn.TransformerEncoder over continuous features, as time-series and multimodal models use it.
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


class MultiModal(nn.Module):
    # Two modality branches (a transformer over tokens, an MLP over features) fused by a head:
    # the multi-branch shape graph pipelines are for.
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.text = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.image = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32))
        self.head = nn.Linear(64, 3)

    def forward(self, text, image):
        t = self.text(text).mean(dim=1)
        return self.head(torch.cat([t, self.image(image)], dim=1))


def multimodal_inputs(g):
    return [("text", torch.randn(BATCH, 6, 32, generator=g)),
            ("image", torch.randn(BATCH, 64, generator=g))]


class ViT(nn.Module):
    # Patch embedding by a strided conv, a learned class token, position embeddings, encoder.
    def __init__(self, size=32, patch=8, hidden=32):
        super().__init__()
        self.patch = nn.Conv2d(3, hidden, patch, stride=patch)
        n = (size // patch) ** 2
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, hidden))
        self.pos = nn.Parameter(0.02 * torch.randn(1, n + 1, hidden))
        layer = nn.TransformerEncoderLayer(hidden, 4, 2 * hidden, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        p = self.patch(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        h = self.encoder(torch.cat([cls, p], dim=1) + self.pos)
        return self.head(h[:, 0])


CLASSIC = [
    ("resnet18", torchvision_model("resnet18"), image(64)),
    ("resnet50", torchvision_model("resnet50"), image(64)),
    ("mobilenet_v2", torchvision_model("mobilenet_v2"), image(64)),
    ("googlenet", torchvision_model("googlenet", aux_logits=False, init_weights=True), image(64)),
    ("inception_v3", torchvision_model("inception_v3", aux_logits=False, init_weights=True),
     image(96)),
    ("densenet121", torchvision_model("densenet121"), image(64)),
    ("squeezenet1_0", torchvision_model("squeezenet1_0"), image(64)),
    ("dlrm", DLRM, dlrm_inputs),
    ("dlrm_embedding_sum", DLRMEmbeddingSum, dlrm_inputs),
    ("dlrm_offsets", DLRMOffsets, dlrm_offsets_inputs),
    ("two_tower", TwoTower, two_tower_inputs),
    ("candle_uno", CandleUno, candle_inputs),
    ("bert", Bert, ids_inputs),
    ("transformer_encoder", Encoder, lambda g: [("x", torch.randn(BATCH, 6, 32, generator=g))]),
    ("multimodal", MultiModal, multimodal_inputs),
    ("vit", ViT, image(32)),
]
