"""`neuron-migrate validate`: run the original and the migrated program side by side and diff what they compute.

`child/` runs inside each program's own interpreter (the capture hook: stdlib and torch only);
`runner` starts the programs and reads back what they recorded; `compare` judges it; `report`
shows it; `compile_stats` summarises compile behaviour; `refenv` builds the old-stack environment;
`command` is the CLI glue.
"""
