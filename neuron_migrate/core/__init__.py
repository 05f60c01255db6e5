"""What every tool shares and none owns: files, configuration, rule selection, names, source
positions, the job pool, notebook cells and the facts of the old stack. Imports no tool."""
