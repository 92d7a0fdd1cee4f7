"""The leader: election, rebalance, autoscaling, and the read-only status API."""
