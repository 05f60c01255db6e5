"""dropout_train.py with dropout at p=0: what --no-dropout should make of it."""

from dropout_train import main

if __name__ == "__main__":
    main(p=0.0)
