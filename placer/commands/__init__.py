"""The command-line side of placer's own commands that are more than argument parsing: each module turns
parsed arguments into library calls and printed output. `placer.cli` dispatches here; the library never imports it.
"""
