"""The peer of scripts/benchmark_accuracy.py: SimCLR with lightly 1.6, in PyTorch.

Runs in its own virtual environment, never in ours (torch is no dependency of
simclr_tf, nor of its tests):

    python -m venv .venv-lightly
    .venv-lightly/bin/pip install torch torchvision lightly==1.6.0

benchmark_accuracy.py calls it as

    .venv-lightly/bin/python dev/lightly_simclr.py --data=DATA.npz --out=OUT.npz \\
        --seed=0 --epochs=10 --batch_size=256 ...

DATA.npz holds uint8 `train_images` [N, S, S, 3] (the pretraining images, in the
split's canonical order), `bank_images` [M, S, S, 3] and `test_images` [Q, S, S, 3]
(the kNN bank / probe training set and the test set, float32 in [0, 1] as
simclr_tf's evaluation preprocessing made them, so both systems embed the same pixels). OUT.npz gets
`bank_h`, `test_h` (the frozen representation h, inference mode) and `timing`
(a JSON string: steps, training wall time, seconds per step, threads).

lightly provides what a lightly user would take from it: `NTXentLoss`,
`SimCLRProjectionHead`, `SimCLRTransform`, `LARS` and `CosineWarmupScheduler`. The
encoder is written here (torchvision has no width multiplier nor CIFAR stem): the
same ResNet v1 as simclr_tf's (`simclr_tf/models/resnet.py`), layer for layer: CIFAR
stem (3x3/1 conv, BN-ReLU, no max-pool), basic blocks [2, 2, 2, 2] of widths
64/128/256/512 times --width, a projection shortcut (1x1 conv + BN) on the first
block of every group, the last BN of each block with gamma 0, BN momentum 0.1
(TensorFlow's 0.9) and epsilon 1e-5, convolutions without bias initialised
truncated-normal fan-in (scale 1), h = global average pool.

Differences from simclr_tf that this script removes (documented in
docs/benchmarks.md): the loss is 2 x lightly's NTXentLoss (lightly averages the two
directions, the paper and we sum them), the projection head's dense kernels start
N(0, 0.01) and its last BN has no beta (lightly's has one), batch-norm parameters and
biases are excluded from weight decay and from LARS's trust ratio (a parameter group
with weight_decay 0, which lightly's LARS also excludes from the trust ratio).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import time

import numpy as np
import torch
from lightly.loss import NTXentLoss
from lightly.models.modules import SimCLRProjectionHead
from lightly.transforms import SimCLRTransform
from lightly.utils.lars import LARS
from lightly.utils.scheduler import CosineWarmupScheduler
from PIL import Image
from torch import nn

BN_MOMENTUM = 0.1   # TensorFlow's batch_norm_decay 0.9
BN_EPSILON = 1e-5
GROUP_WIDTHS = (64, 128, 256, 512)
GROUP_STRIDES = (1, 2, 2, 2)


def conv_init_(weight: torch.Tensor) -> None:
    """Keras VarianceScaling(scale=1, fan_in, truncated_normal), as simclr_tf's."""
    fan_in = weight.shape[1] * weight.shape[2] * weight.shape[3]
    std = math.sqrt(1.0 / fan_in) / 0.87962566103423978
    nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)


def conv(in_channels: int, out_channels: int, kernel: int, stride: int) -> nn.Conv2d:
    # Symmetric padding (k - 1) // 2 equals simclr_tf's fixed padding for k = 3 and 1.
    layer = nn.Conv2d(in_channels, out_channels, kernel, stride, padding=(kernel - 1) // 2,
                      bias=False)
    conv_init_(layer.weight)
    return layer


def batch_norm(channels: int, zero_gamma: bool = False) -> nn.BatchNorm2d:
    layer = nn.BatchNorm2d(channels, eps=BN_EPSILON, momentum=BN_MOMENTUM)
    if zero_gamma:
        nn.init.zeros_(layer.weight)
    return layer


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, filters: int, stride: int, projection: bool):
        super().__init__()
        self.conv1 = conv(in_channels, filters, 3, stride)
        self.bn1 = batch_norm(filters)
        self.conv2 = conv(filters, filters, 3, 1)
        self.bn2 = batch_norm(filters, zero_gamma=True)
        self.shortcut = (nn.Sequential(conv(in_channels, filters, 1, stride),
                                       batch_norm(filters)) if projection else None)

    def forward(self, x):
        shortcut = x if self.shortcut is None else self.shortcut(x)
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + shortcut)


class ResNet18Cifar(nn.Module):
    """ResNet-18 v1 with the CIFAR stem and a width multiplier; forward -> h [B, D]."""

    def __init__(self, width: float):
        super().__init__()
        widths = [int(round(w * width)) for w in GROUP_WIDTHS]
        self.stem = nn.Sequential(conv(3, widths[0], 3, 1), batch_norm(widths[0]),
                                  nn.ReLU())
        blocks, channels = [], widths[0]
        for filters, stride in zip(widths, GROUP_STRIDES):
            blocks.append(BasicBlock(channels, filters, stride, projection=True))
            blocks.append(BasicBlock(filters, filters, 1, projection=False))
            channels = filters
        self.blocks = nn.Sequential(*blocks)
        self.output_dim = channels

    def forward(self, images):
        return self.blocks(self.stem(images)).mean(dim=(2, 3))


class TwoViews(torch.utils.data.Dataset):
    def __init__(self, images: np.ndarray, transform):
        self.images = images
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        views = self.transform(Image.fromarray(self.images[index]))
        return views[0], views[1]


def projection_head(dim: int, out_dim: int, num_layers: int) -> SimCLRProjectionHead:
    head = SimCLRProjectionHead(input_dim=dim, hidden_dim=dim, output_dim=out_dim,
                                num_layers=num_layers, batch_norm=True)
    for module in head.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.01)
    last_bn = head.layers[-1]
    nn.init.zeros_(last_bn.bias)
    last_bn.bias.requires_grad_(False)  # simclr_tf's (and the authors') last BN: no beta
    return head


def parameter_groups(modules, weight_decay):
    decay, no_decay = [], []
    for module in modules:
        for sub in module.modules():
            for name, parameter in sub.named_parameters(recurse=False):
                if not parameter.requires_grad:
                    continue
                excluded = isinstance(sub, (nn.BatchNorm1d, nn.BatchNorm2d)) or name == "bias"
                (no_decay if excluded else decay).append(parameter)
    return [dict(params=decay, weight_decay=weight_decay),
            dict(params=no_decay, weight_decay=0.0)]


@torch.no_grad()
def embed(encoder, images: np.ndarray, batch_size: int, device="cpu") -> np.ndarray:
    """h in inference mode of float images in [0, 1] (uint8 ones are divided by 255)."""
    encoder.eval()
    outputs = []
    for start in range(0, len(images), batch_size):
        batch = torch.from_numpy(images[start:start + batch_size]).float()
        if images.dtype == np.uint8:
            batch = batch.div_(255.0)
        batch = batch.permute(0, 3, 1, 2).contiguous().to(device)
        outputs.append(encoder(batch).cpu().numpy())
    return np.concatenate(outputs).astype(np.float32)


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def _worker_init(worker_id):
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=float, required=True)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--learning_rate", type=float, required=True,
                        help="the peak rate, already scaled to the batch")
    parser.add_argument("--warmup_epochs", type=float, default=0.0)
    parser.add_argument("--weight_decay", type=float, default=1e-4)
    parser.add_argument("--temperature", type=float, default=0.2)
    parser.add_argument("--color_jitter_strength", type=float, default=0.5)
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--num_proj_layers", type=int, default=2)
    parser.add_argument("--proj_out_dim", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch.set_num_threads; 0 keeps torch's default")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--eval_batch_size", type=int, default=512)
    args = parser.parse_args(argv)

    if args.threads > 0:  # 0: torch's default
        torch.set_num_threads(args.threads)
    # A GPU when there is one (not tried here: the machines of this project have none).
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = seed_everything(args.seed)
    data = np.load(args.data)
    train_images = data["train_images"]
    image_size = train_images.shape[1]
    num_examples = len(train_images)
    # simclr_tf's step arithmetic (schedules.compute_steps, the authors' formula).
    total_steps = int(num_examples * args.epochs // args.batch_size + 1)
    warmup_steps = int(round(args.warmup_epochs * num_examples // args.batch_size))

    transform = SimCLRTransform(input_size=image_size, cj_strength=args.color_jitter_strength,
                                min_scale=0.08, random_gray_scale=0.2, gaussian_blur=0.0,
                                hf_prob=0.5, normalize=None)
    loader = torch.utils.data.DataLoader(
        TwoViews(train_images, transform), batch_size=args.batch_size, shuffle=True,
        drop_last=True, num_workers=args.workers, persistent_workers=args.workers > 0,
        generator=generator, worker_init_fn=_worker_init)
    encoder = ResNet18Cifar(args.width)
    head = projection_head(encoder.output_dim, args.proj_out_dim, args.num_proj_layers)
    encoder.to(device)
    head.to(device)
    criterion = NTXentLoss(temperature=args.temperature)
    optimizer = LARS(parameter_groups([encoder, head], args.weight_decay),
                     lr=args.learning_rate, momentum=0.9, trust_coefficient=0.001)
    scheduler = CosineWarmupScheduler(optimizer, warmup_epochs=warmup_steps,
                                      max_epochs=total_steps, end_value=0.0)

    encoder.train()
    head.train()
    step, losses = 0, []
    started = time.perf_counter()
    while step < total_steps:
        for view0, view1 in loader:
            view0, view1 = view0.to(device), view1.to(device)
            z0, z1 = head(encoder(view0)), head(encoder(view1))
            # The paper's loss sums the two directions; lightly's averages them.
            loss = 2.0 * criterion(z0, z1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % 50 == 0 or step == total_steps:
                losses.append((step, loss.item(), time.time()))
                print(f"lightly step {step}/{total_steps} loss {loss.item():.4g}",
                      flush=True)
            if step == 1:
                first_step_done = time.perf_counter()
            if step >= total_steps:
                break
        if not math.isfinite(loss.item()):
            raise SystemExit(f"lightly: non-finite loss at step {step}")
    ended = time.perf_counter()
    train_seconds = ended - started

    bank_h = embed(encoder, data["bank_images"], args.eval_batch_size, device)
    test_h = embed(encoder, data["test_images"], args.eval_batch_size, device)
    timing = dict(steps=total_steps, warmup_steps=warmup_steps,
                  train_seconds=train_seconds,
                  # After the first step, as simclr_tf's (whose first step traces).
                  seconds_per_step=(ended - first_step_done) / max(total_steps - 1, 1),
                  threads=args.threads, workers=args.workers, device=device, losses=losses,
                  # The encoder's size, to set beside simclr_tf's (the same network).
                  encoder_trainable_parameters=sum(
                      p.numel() for p in encoder.parameters() if p.requires_grad),
                  torch=torch.__version__)
    np.savez(args.out, bank_h=bank_h, test_h=test_h, timing=json.dumps(timing))
    print(json.dumps({k: v for k, v in timing.items() if k != "losses"}), flush=True)


if __name__ == "__main__":
    main()
