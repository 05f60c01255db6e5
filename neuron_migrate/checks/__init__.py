"""Static checks for what hurts on a static-shape compiler (`neuron-migrate check`).

Layout: `rules/` holds one module per rule (its docstring is its documentation, its VALID and
INVALID snippets are its tests); `checker.py` runs them all in one `ast` walk and applies fixes;
`context.py` answers "what does this name mean" and "is this code compiled, an eager step, or
neither"; `values.py` "is this a device tensor, a mask, NumPy or a number"; `suppressions.py`,
`output.py`, `notebooks.py` and `command.py` do what their names say.
"""

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.model import Diagnostic, Edit, FileReport, Fix, Severity

__all__ = ["CheckOptions", "Diagnostic", "Edit", "FileReport", "Fix", "Severity", "check_source"]
