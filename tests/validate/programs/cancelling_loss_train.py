"""A loss that nearly cancels: terms of +-100 summing to a few units, so the order the kernel adds
them in moves it by float32 rounding well past the float32 tolerance (`cancelling_loss_flipped.py`
adds them in the reverse order: the same computation, as another backend's kernels round it)."""

import torch


def main(flipped: bool = False) -> None:
    torch.manual_seed(0)
    base = torch.randn(2048, 16)
    x = torch.stack([base, base + 1e-3 * torch.randn(2048, 16)], 1).reshape(4096, 16)
    signs = torch.tensor([100.0, -100.0]).repeat(2048)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    for _ in range(4):
        terms = model(x).squeeze(1) * signs
        loss = (terms.flip(0) if flipped else terms).sum().abs()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
