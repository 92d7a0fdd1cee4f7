"""The handler: membership, assignment watch, one consumer per owned partition, the sink."""
