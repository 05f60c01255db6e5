"""Dies with an error, as a migrated script with a missing import would."""

raise ModuleNotFoundError("No module named 'torch_xla'")
