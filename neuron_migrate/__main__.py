"""Allows `python -m neuron_migrate`."""

import sys

from neuron_migrate.cli import main

sys.exit(main())
