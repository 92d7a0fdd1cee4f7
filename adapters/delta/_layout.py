"""The landing table's layout, shared by its writers and its upkeep."""

__all__ = ["COMMIT_ATTEMPTS", "CONFLICT", "LOG_FOLDER", "PARTITION_COLUMN"]

PARTITION_COLUMN = "date"
LOG_FOLDER = "_delta_log"
# delta-rs tries the next version when another commit took the one it tried (15 times by
# default). Four writers and the compaction ran out of 15 on 0.6 % of commits, and a
# commit given up on costs a rewrite of its batch; each try is a read of the commits since.
COMMIT_ATTEMPTS = 100
CONFLICT = "Concurrent transaction"  # delta-rs's refusal of a fenced commit, in its message
