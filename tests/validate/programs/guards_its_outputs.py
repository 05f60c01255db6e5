"""Trains like cancelling_loss_train.py (reversed with --flipped) and writes ./out/loss.txt; where
that is already there it asks before overwriting it, as scripts that guard their outputs do (with
no terminal to answer, it stops)."""

import sys
from pathlib import Path

from cancelling_loss_train import main

if __name__ == "__main__":
    out = Path("out/loss.txt")
    if out.exists() and input(f"{out} exists: overwrite it? [y/N] ") != "y":
        sys.exit(f"not overwriting {out}")
    main(flipped="--flipped" in sys.argv)
    out.parent.mkdir(exist_ok=True)
    out.write_text("trained\n")
