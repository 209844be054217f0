"""How far bf16 autocast moves PyTorch's weight gradients from its fp32 ones
on the ResNet-20 step that tests/test_gpu_precision.c takes with PruneX
(batch 16, 3x32x32 inputs in [-1, 1), 10 classes, from initialisation): the
yardstick for that test's bf16 bound. Prints the relative L2 error and the
cosine of the two gradients, fp32 with TF32 off as the reference and bf16
autocast with channels_last, over a few seeds. Needs a CUDA GPU.
    python3 bench/gpu/torch_grad_check.py"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from torch_bench import ResNet  # noqa: E402


def grads(model, x, y, bf16):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.item(), torch.cat([p.grad.float().flatten() for p in model.parameters()])


def main():
    if not torch.cuda.is_available():
        print("torch_grad_check.py: no CUDA GPU", file=sys.stderr)
        sys.exit(1)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda:0")
    worst = 0.0
    for seed in range(3):
        torch.manual_seed(seed)
        model = ResNet("resnet20").to(dev).train()
        x = torch.rand(16, 3, 32, 32, device=dev) * 2 - 1
        y = torch.randint(0, 10, (16,), device=dev)
        l32, g32 = grads(model, x, y, False)
        model = model.to(memory_format=torch.channels_last)
        l16, g16 = grads(model, x.contiguous(memory_format=torch.channels_last), y, True)
        rel = ((g16 - g32).norm() / g32.norm()).item()
        cos = (torch.dot(g16, g32) / (g16.norm() * g32.norm())).item()
        worst = max(worst, rel)
        print("seed %d: loss fp32 %.6f bf16 %.6f; gradients: relative L2 %.3f, cosine %.4f"
              % (seed, l32, l16, rel, cos))
    print("RESULT torch_bf16_grad_rel_l2_max %.3f" % worst)


if __name__ == "__main__":
    main()
