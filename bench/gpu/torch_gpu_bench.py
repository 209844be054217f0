"""PyTorch peer for bench/gpu/run.sh: the ResNets of bench/train/torch_bench.py
(the same definitions as libpxcore's models) trained eagerly on a CUDA GPU
with SGD (momentum 0.9, weight decay 5e-4), fp32 with TF32 allowed in cuDNN
and cuBLAS as the PruneX run allows it, on a few pre-made random batches of
3x32x32 inputs, 10 classes, copied from pinned host memory every step as the
PruneX engine copies its inputs. Prints images/s and the GPU memory peak as
RESULT lines; exits 1 with a message when there is no GPU.

The configurations users tune PyTorch to: --cudnn-benchmark 1 (cuDNN times
its algorithms), --channels-last 1 (model and inputs in
torch.channels_last) and --bf16 1 (torch.autocast to bfloat16 around the
forward pass and the loss, fp32 master weights).

--torchvision NAME trains torchvision's own module instead (random weights,
--classes, default 1000) at --image-size (default 224): the ImageNet-size
bench (bench/gpu/imagenet.sh); --compile default|max-autotune wraps it in
torch.compile (its compilation runs in the warm-up steps, untimed)."""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from torch_bench import ResNet  # noqa: E402


def main():
    # PX_BENCH_CUDA_PROFILE=1: the timed steps between cudaProfilerStart/Stop
    # for `ncu --profile-from-start off`, as px_bench_gpu_train does
    profile = os.environ.get("PX_BENCH_CUDA_PROFILE") == "1"
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--tf32", type=int, default=1)
    ap.add_argument("--cudnn-benchmark", type=int, default=0,
                    help="1: let cuDNN time its algorithms")
    ap.add_argument("--channels-last", type=int, default=0,
                    help="1: model and inputs in torch.channels_last")
    ap.add_argument("--bf16", type=int, default=0,
                    help="1: bf16 autocast around the forward pass and the loss")
    ap.add_argument("--torchvision", default=None,
                    help="torchvision's module NAME instead of --model")
    ap.add_argument("--image-size", type=int, default=None,
                    help="input side (default 32, 224 with --torchvision)")
    ap.add_argument("--classes", type=int, default=None,
                    help="classes (default 10, 1000 with --torchvision)")
    ap.add_argument("--compile", default="none", choices=("none", "default", "max-autotune"),
                    help="torch.compile mode")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu_bench.py: PyTorch sees no CUDA GPU (torch %s)" % torch.__version__,
              file=sys.stderr)
        sys.exit(1)
    dev = torch.device("cuda:0")
    torch.backends.cudnn.allow_tf32 = bool(a.tf32)
    torch.backends.cuda.matmul.allow_tf32 = bool(a.tf32)
    torch.backends.cudnn.benchmark = bool(a.cudnn_benchmark)
    torch.manual_seed(1)
    if a.torchvision:
        import torchvision
        size = a.image_size or 224
        classes = a.classes or 1000
        model = getattr(torchvision.models, a.torchvision)(num_classes=classes).to(dev)
        name = a.torchvision
    else:
        size = a.image_size or 32
        classes = a.classes or 10
        model = ResNet(a.model).to(dev)
        name = a.model
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    crit = nn.CrossEntropyLoss()
    model.train()
    step_model = model if a.compile == "none" else torch.compile(model, mode=a.compile)
    g = torch.Generator().manual_seed(0)
    nb = 4
    xs = [(torch.rand(a.batch, 3, size, size, generator=g) * 2 - 1).pin_memory()
          for _ in range(nb)]
    ys = [torch.randint(0, classes, (a.batch,), generator=g).pin_memory() for _ in range(nb)]
    torch.cuda.reset_peak_memory_stats(dev)
    t0 = None
    loss = None
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            torch.cuda.synchronize(dev)
            if profile:
                torch.cuda.profiler.start()
            t0 = time.perf_counter()
        x = xs[s % nb].to(dev, non_blocking=True).contiguous(memory_format=fmt)
        y = ys[s % nb].to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bool(a.bf16)):
            loss = crit(step_model(x), y)
        loss.backward()
        opt.step()
        loss.item()  # as PruneX returns the loss to the host every step
    torch.cuda.synchronize(dev)
    el = time.perf_counter() - t0
    if profile:
        torch.cuda.profiler.stop()
    print("torch %s %s at %dx%d on %s (benchmark %d, channels_last %d, bf16 %d, compile %s): "
          "%d steps in %.3f s (%.2f ms/step), last loss %.4f"
          % (torch.__version__, name, size, size, torch.cuda.get_device_name(dev),
             a.cudnn_benchmark, a.channels_last, a.bf16, a.compile, a.steps, el,
             1e3 * el / a.steps, loss.item()))
    print("RESULT images_per_sec %.1f img/s" % (a.steps * a.batch / el))
    print("RESULT gpu_peak_mb %.1f MB" % (torch.cuda.max_memory_allocated(dev) / 1e6))


if __name__ == "__main__":
    main()
