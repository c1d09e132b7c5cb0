#!/usr/bin/env python
"""The cost model of docs/scaling.md, computed from its inputs (printed as the page's
tables: `python scripts/scaling_model.py`). Each input says where it comes from:
measured here (a command of this repository), counted from a graph, or published.
tests/test_docs.py checks that the page holds what this prints.

What one replica and one host pay per step of the paper's configurations (global batch
4,096; ResNet-50 x1, x2, x4 with SimCLR v2's 3-layer projection head and a 1000-class
head) on TPU v3 slices and 8-GPU hosts.
"""
import math

MB = 1e6
BATCH = 4096
IMAGENET_TRAIN = 1_281_167
PROJ_OUT_DIM = 128  # z: --proj_out_dim
H_DIM = {1: 2048, 2: 4096, 4: 8192}  # h: the encoder's pooled output

# Counted from the compiled step's graph, per replica, 2 replicas (docs/scaling.md:
# `benchmark.py collectives --encoder=resnet --resnet_depth=50 --width_multiplier=W
# --image_size=64 --stem=imagenet --train_batch_size=4 --num_proj_layers=3
# --use_blur=false --num_classes=1000`). Neither the gradients nor the BN statistics
# depend on the image size or the batch.
GRADIENT_BYTES = {1: 136_864_416, 2: 528_397_216, 4: 2_075_481_504}
BN_OPS = (168, 112)  # all-reduces forward, backward (56 BN layers: 3 and 2 each)
BN_BYTES = {1: 369_408 + 246_272, 2: 737_280 + 491_520, 4: 1_473_024 + 982_016}

# Published: Cloud TPU v3 (cloud.google.com/tpu/docs/v3): a 1024-chip pod, all-reduce
# bandwidth 340 TB/s per pod; 2 TensorCores (replicas) a chip; a v3-8 is one host.
TPU_V3_ALLREDUCE_PER_CHIP = 340e12 / 1024
CORES_PER_CHIP, CORES_PER_HOST = 2, 8
# NVLink per GPU, both directions together (NVIDIA): V100 300 GB/s, A100 600 GB/s.
NVLINK = {"8x V100 (NVLink 2)": 300e9, "8x A100 (NVLink 3)": 600e9}

# Published (SimCLR v1, section 2.2): ResNet-50, batch 4096,
# 100 epochs on 128 TPU v3 cores in about 1.5 hours.
PAPER_IMAGES_PER_SEC_PER_CORE = 100 * IMAGENET_TRAIN / (1.5 * 3600) / 128
# Measured here (docs/performance.md, "Input pipeline"): images per second on one
# core of the 2-core AMD EPYC, 224-px views from a 375x500 JPEG, two views each:
# the whole host augmentation, or the host part of --augment_on=device.
DECODE_AUGMENT_PER_CORE = {"host": 124, "device": 313}
# A decoded 375x500 RGB image (uint8), what the shuffle buffer and --cache hold.
DECODED_IMAGE_BYTES = 375 * 500 * 3
SHUFFLE_BUFFER = 10_000  # data/pipeline.py DEFAULT_SHUFFLE_BUFFER_SIZE


def z_bytes(replicas):
    """Per replica and step, ours: the all-gather of z of both views (in: this
    replica's rows, out: every replica's), and its adjoint, an all-reduce of the
    gathered gradient; the authors: an all-reduce of the R-times-larger scattered z,
    forward and backward."""
    n = BATCH // replicas
    own = 2 * n * PROJ_OUT_DIM * 4
    return dict(ours_in=own, ours_out=own * replicas,
                backward=own * replicas, authors=own * replicas)


def tpu_rows():
    rows = []
    for cores in (8, 32, 128, 512):
        hosts = max(cores // CORES_PER_HOST, 1)
        for width in (1, 2, 4):
            grad = GRADIENT_BYTES[width]
            # Each chip reduces what its two cores hold; the sum runs over the chips.
            seconds = grad / TPU_V3_ALLREDUCE_PER_CHIP
            # The paper's rate per core for x1, lower by the FLOPs for wider nets
            # (a conv's FLOPs grow as width squared): modelled, not measured.
            per_core = PAPER_IMAGES_PER_SEC_PER_CORE / width ** 2
            step = BATCH / (per_core * cores)
            z = z_bytes(cores)
            rows.append(dict(
                slice=f"v3-{cores}", hosts=hosts, width=width,
                gradients_mb=grad / MB, allreduce_ms=1e3 * seconds,
                step_ms=1e3 * step, share=seconds / step,
                z_out_mb=z["ours_out"] / MB, z_backward_mb=z["backward"] / MB,
                authors_z_mb=z["authors"] / MB, bn_mb=BN_BYTES[width] / MB,
                images_per_sec_per_host=per_core * cores / hosts,
                cores_ours=per_core * cores / hosts / DECODE_AUGMENT_PER_CORE["host"],
                cores_device=per_core * cores / hosts / DECODE_AUGMENT_PER_CORE["device"],
                cores_before=per_core * cores / DECODE_AUGMENT_PER_CORE["host"]))
    return rows


def gpu_rows():
    rows = []
    for host, bandwidth in NVLINK.items():
        for width in (1, 2, 4):
            grad = GRADIENT_BYTES[width]
            # A ring all-reduce sends and receives 2(N-1)/N of the bytes per GPU, each
            # half of the link's two directions.
            seconds = 2 * 7 / 8 * grad / (bandwidth / 2)
            rows.append(dict(host=host, width=width, gradients_mb=grad / MB,
                             allreduce_ms=1e3 * seconds,
                             before_ms=2e3 * seconds))
    return rows


def memory_rows():
    rows = []
    for hosts in (1, 4, 16, 64):
        share = math.ceil(IMAGENET_TRAIN / hosts)
        rows.append(dict(
            hosts=hosts, share=share,
            shuffle_gb=min(SHUFFLE_BUFFER, share) * DECODED_IMAGE_BYTES / 1e9,
            cache_gb=share * DECODED_IMAGE_BYTES / 1e9,
            **{f"knn_x{w}_gb": IMAGENET_TRAIN * d * 4 / 1e9 for w, d in H_DIM.items()}))
    return rows


def tables():
    """The page's tables, as markdown lines."""
    lines = ["| slice | hosts | R50 | gradients MB | all-reduce ms | step ms (paper's rate) "
             "| all-reduce / step | z all-gathered MB (its backward all-reduce) "
             "| authors' z all-reduce MB (backward alike) | BN MB "
             "| images/s per host | cores per host: ours (device views) | before |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in tpu_rows():
        lines.append(
            f"| {r['slice']} | {r['hosts']} | x{r['width']} | {r['gradients_mb']:.0f} | "
            f"{r['allreduce_ms']:.2f} | {r['step_ms']:.0f} | {100 * r['share']:.1f}% | "
            f"{r['z_out_mb']:.2f} ({r['z_backward_mb']:.2f}) | {r['authors_z_mb']:.2f} | "
            f"{r['bn_mb']:.2f} | {r['images_per_sec_per_host']:.0f} | "
            f"{r['cores_ours']:.1f} ({r['cores_device']:.1f}) | {r['cores_before']:.0f} |")
    lines += ["", "| host | R50 | gradients MB | all-reduce ms | before (twice) ms |",
              "|---|---|---|---|---|"]
    for r in gpu_rows():
        lines.append(f"| {r['host']} | x{r['width']} | {r['gradients_mb']:.0f} | "
                     f"{r['allreduce_ms']:.2f} | {r['before_ms']:.2f} |")
    lines += ["", "| hosts | examples per host | shuffle buffer GB | --cache GB "
              "| kNN bank of train, x1 / x2 / x4 GB |", "|---|---|---|---|---|"]
    for r in memory_rows():
        lines.append(f"| {r['hosts']} | {r['share']:,} | {r['shuffle_gb']:.1f} | "
                     f"{r['cache_gb']:.0f} | "
                     f"{r['knn_x1_gb']:.1f} / {r['knn_x2_gb']:.1f} / {r['knn_x4_gb']:.1f} |")
    return lines


def main():
    print("\n".join(tables()))


if __name__ == "__main__":
    main()
