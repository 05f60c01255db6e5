"""sharded_optimizer_train.py with its ZeRO-like optimizer."""

from sharded_optimizer_train import main

if __name__ == "__main__":
    main(sharded=True)
