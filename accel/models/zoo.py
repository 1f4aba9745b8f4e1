"""Built-in demo models: deterministic (fixed seed), no downloads, each with its InputSpec."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

SEED = 0


class MLP(nn.Module):
    """Linear 1024-1024-1024-10 with ReLU."""

    def __init__(self, in_features: int = 1024, hidden: int = 1024, num_classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = nn.ReLU()
        self.fc3 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + identity)


class SmallResNet(nn.Module):
    """A small ResNet: conv/BN/ReLU basic blocks with residuals, 3x64x64 in, 10 classes."""

    def __init__(
        self, widths: tuple[int, ...] = (32, 64, 128), blocks: int = 2, num_classes: int = 10
    ):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        layers = []
        cin = widths[0]
        for i, w in enumerate(widths):
            stage = [BasicBlock(cin, w, stride=1 if i == 0 else 2)]
            stage += [BasicBlock(w, w) for _ in range(blocks - 1)]
            layers.append(nn.Sequential(*stage))
            cin = w
        self.layer1, self.layer2, self.layer3 = layers[0], layers[1], layers[2]
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden // num_heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 rather than head_dim so the block still works when pruning removes channels.
        q = self.query(x).view(b, s, self.num_heads, -1).transpose(1, 2)
        k = self.key(x).view(b, s, self.num_heads, -1).transpose(1, 2)
        v = self.value(x).view(b, s, self.num_heads, -1).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, s, -1))


class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, num_heads: int, ffn: int):
        super().__init__()
        self.attention = SelfAttention(hidden, num_heads)
        self.norm1 = nn.LayerNorm(hidden)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.act = nn.GELU()
        self.ffn_out = nn.Linear(ffn, hidden)
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.ffn_out(self.act(self.ffn_in(x))))


class MiniBert(nn.Module):
    """A BERT-mini-style encoder with a classifier on the first token."""

    def __init__(
        self,
        vocab_size: int = 8000,
        hidden: int = 256,
        num_layers: int = 4,
        num_heads: int = 4,
        ffn: int = 1024,
        max_positions: int = 512,
        num_classes: int = 4,
    ):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, hidden)
        self.position_embedding = nn.Embedding(max_positions, hidden)
        self.embedding_norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(EncoderLayer(hidden, num_heads, ffn) for _ in range(num_layers))
        self.pooler = nn.Linear(hidden, hidden)
        self.pooler_act = nn.Tanh()
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.token_embedding(input_ids) + self.position_embedding(positions)
        x = self.embedding_norm(x)
        for layer in self.layers:
            x = layer(x)
        return self.classifier(self.pooler_act(self.pooler(x[:, 0])))


class LSTMClassifier(nn.Module):
    """Embedding + LSTM text classifier (last hidden state -> classes)."""

    def __init__(
        self, vocab_size: int = 5000, embed: int = 128, hidden: int = 256, num_classes: int = 4
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(tokens))
        return self.classifier(out[:, -1])


@dataclass(frozen=True)
class ZooEntry:
    name: str
    description: str
    factory: Callable[..., nn.Module]
    input_spec: str
    task: str = "classification"


def _warm_batchnorm(model: nn.Module, spec: str, batches: int = 4) -> None:
    """Give BatchNorm layers non-trivial running statistics (so BN folding is a real test)."""
    from accel.models.inputs import InputSpec

    s = InputSpec.parse(spec)
    model.train()
    with torch.no_grad():
        for i in range(batches):
            x = s.sample(seed=100 + i, dims={"batch": 8})
            model(*x.values())
    model.eval()


def _build(entry_name: str, **kwargs: Any) -> nn.Module:
    entry = ZOO[entry_name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = entry.factory(**kwargs)
        if any(isinstance(m, nn.BatchNorm2d) for m in model.modules()):
            _warm_batchnorm(model, entry.input_spec)
    return model.eval()


ZOO: dict[str, ZooEntry] = {
    e.name: e
    for e in (
        ZooEntry(
            "mlp",
            "MLP: Linear 1024-1024-1024-10 with ReLU",
            MLP,
            "x:float32[batch,1024]; batch=1..256:8",
        ),
        ZooEntry(
            "resnet",
            "Small ResNet (3 stages of basic blocks, BatchNorm, residuals), 3x64x64 input, 10 classes",
            SmallResNet,
            "x:float32[batch,3,64,64]; batch=1..64:1",
        ),
        ZooEntry(
            "transformer",
            "BERT-mini-style encoder (4 layers, hidden 256, 4 heads, GELU MLP) + classifier",
            MiniBert,
            "input_ids:int64[batch,seq]{0..8000}; batch=1..32:1; seq=1..512:128",
        ),
        ZooEntry(
            "lstm",
            "Embedding + LSTM text classifier (vocab 5000, hidden 256, 4 classes)",
            LSTMClassifier,
            "tokens:int64[batch,seq]{0..5000}; batch=1..64:1; seq=1..512:64",
        ),
    )
}


def build_zoo_model(name: str, **kwargs: Any) -> nn.Module:
    """Build zoo model ``name`` with a fixed seed (same weights every time)."""
    return _build(name, **kwargs)
