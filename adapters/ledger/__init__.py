"""The AcceptanceLedger port as JSON Lines: ``{ledger_dir}/{gateway_id}.jsonl``, the format
the Spark audit reads (see ``adapters.spark``)."""

from adapters.ledger._jsonl import JsonlLedger, ledger_line

__all__ = ["JsonlLedger", "ledger_line"]
