"""Adapters: the ports of ``core.ports`` implemented over real (and in-memory) backends."""
