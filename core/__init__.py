"""shoal's pure domain: partitioning, assignment strategies, the coordination
store's rules, the handoff, scaling policy, the landed table.

Nothing in this package does I/O, reads a clock, or imports anything outside the
standard library and itself (enforced by import-linter in ``tox -e lint``).
"""
