"""A wrong "migration" of tiny_generate.py: the model is initialised from another seed."""

import sys

from tiny_generate import main

if __name__ == "__main__":
    sys.argv += ["--init-seed", "1"]
    main()
