"""The loop the capture-overhead benchmark times: an MLP trained with SGD, on CPU or XLA:CPU.

Prints `ms_per_step X cpu_ms_per_step Y`, timed inside the process over the steps after a warm-up,
so start-up, imports and the capture's exit-time write are not counted. X is the median wall time
of a step; Y the process CPU time (all threads, XLA's included) per step, which load from other
processes on a shared machine hardly moves. One intra-op thread, for the same reason.
"""

import argparse
import statistics
import time

import torch
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--xla", action="store_true", help="lazy tensors on XLA (torch_xla), mark_step per step"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.xla:
        import torch_xla
        import torch_xla.core.xla_model as xm

        device, sync = torch_xla.device(), xm.mark_step
    else:
        device, sync = torch.device("cpu"), lambda: None
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(64, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, 8),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    data = [
        (
            torch.randn(args.batch_size, 64, generator=g),
            torch.randint(0, 8, (args.batch_size,), generator=g),
        )
        for _ in range(16)
    ]
    times = []
    cpu_start = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if args.xla:
                xm.wait_device_ops()
            cpu_start = time.process_time()
        start = time.perf_counter()
        x, y = data[step % len(data)]
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    if args.xla:
        xm.wait_device_ops()
    cpu = (time.process_time() - cpu_start) / args.steps
    print(f"ms_per_step {statistics.median(times) * 1e3:.4f} cpu_ms_per_step {cpu * 1e3:.4f}")


if __name__ == "__main__":
    main()
