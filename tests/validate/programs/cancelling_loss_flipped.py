"""cancelling_loss_train.py adding its loss's terms in the reverse order."""

from cancelling_loss_train import main

if __name__ == "__main__":
    main(flipped=True)
