"""The same loop with every batch padded to 16 tokens (and masked): one graph for all steps."""

from varlen_train import main

if __name__ == "__main__":
    main(pad_to=16)
