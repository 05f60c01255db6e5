"""Allows `python -m neuron_migrate.validate validate ...` and `... env reference DIR`."""

import sys

from neuron_migrate.validate.command import main

sys.exit(main())
