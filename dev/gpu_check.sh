#!/usr/bin/env bash
# GPU check (issue 9): ResNet-50 at 224 px, mixed bfloat16, one GPU: train-step
# throughput (views/s, images/s), achieved GFLOP/s and MFU against a bf16 matmul peak
# measured in the same process; with and without XLA, host vs device augmentation;
# and the peak GPU memory of one gradient-cached step with a global batch of 4096.
# Expected 4-5 minutes on an H100/H200-class GPU (not yet run: no GPU so far). Writes
# gpu_check*.json and gpu_memory_4096.json; paste the printed tables into
# docs/performance.md and its headline figure into README.md.
#
#   bash dev/gpu_check.sh            # needs a CUDA build of TensorFlow 2.21
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-.}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python -c "import tensorflow as tf, sys; g = tf.config.list_physical_devices('GPU'); \
print('GPUs:', g); sys.exit(0 if g else 'no GPU visible to TensorFlow: install tensorflow[and-cuda]==2.21.0')"
B="python scripts/benchmark.py train --preset=gpu_r50"
# 1. The headline: bf16, XLA off and on (XLA is decided by measurement on GPU).
$B --jit_compile=false --json="$out/gpu_check_r50_bf16.json"
$B --jit_compile=true --json="$out/gpu_check_r50_bf16_xla.json" || echo "XLA run failed (see above)"
# 1b. ViT-S/16 at 224 px, bf16 (issue "any encoder").
python scripts/benchmark.py train --preset=gpu_vit_s16 --jit_compile=false \
   --json="$out/gpu_check_vit_s16_bf16.json" || echo "ViT run failed (see above)"
# 2. Augmentation on the device (host only decodes/resizes) vs prepared views.
$B --jit_compile=false --augment_on=device --json="$out/gpu_check_r50_bf16_device_aug.json"
# 3. float32 for reference (TF32 matmuls on Ampere+).
$B --jit_compile=false --mixed_precision=none --steps=5 --windows=3 \
   --json="$out/gpu_check_r50_fp32.json"
# 4. Gradient caching: one step with a global batch of 4096 at 224 px (chunks of 32,
#    device augmentation), GPU peak memory against the plain step of 32 images.
python scripts/benchmark.py memory --preset=r50_224_4096 --batch_sizes=4096 \
   --json="$out/gpu_memory_4096.json" || echo "memory run failed (see above)"
python - "$out" <<'PY'
import glob, json, sys
print("\nrun | views/s | images/s | s/step | GFLOP/s | peak GFLOP/s | MFU")
for path in sorted(glob.glob(f"{sys.argv[1]}/gpu_check_*.json")):
    r = json.load(open(path))["train"][0]
    print(f"{path.split('/')[-1]} | {r['views_per_sec']:.0f} | {r['images_per_sec']:.0f} | "
          f"{r['step_seconds']:.3f} | {r['achieved_gflops_per_sec']:.0f} | "
          f"{r['matmul_peak_gflops_per_sec']:.0f} | {r['mfu']:.3f}")
PY
