"""The base layer: alignment, errors, limits, choice lists, results, versions and the packing-path registry.

Pure Python: nothing here imports numpy, torch or pyarrow, so an agent asking for an alignment or a
rule gets its answer in milliseconds.
"""
