"""Composition roots: each service wires adapters to the core and holds no rules."""
