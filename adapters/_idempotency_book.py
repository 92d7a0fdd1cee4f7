"""``AnswerBook``: idempotency answers by scope in memory, bounded in time and in count.

Shared by the in-memory ``IdempotencyStore`` and the Kafka one (which tails its topic
into a book). An answer counts until ``accepted_at + window`` by the wall clock the caller
passes; past ``max_entries`` the oldest answers are dropped first (a retry of a dropped
answer is published again, and the brokers' duplicate windows are all that cover it).
"""

from __future__ import annotations

from collections import OrderedDict

from core.idempotency import IdempotentAnswer, is_expired

__all__ = ["AnswerBook"]


class AnswerBook:
    def __init__(self, window: float, max_entries: int) -> None:
        if window <= 0:
            raise ValueError(f"window must be above 0 s, not {window}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.window = window
        self.max_entries = max_entries
        self._answers: OrderedDict[str, IdempotentAnswer] = OrderedDict()
        self.dropped = 0  # answers dropped for room, not for age

    def __len__(self) -> int:
        return len(self._answers)

    def put(self, answer: IdempotentAnswer, now: float) -> None:
        """Keep ``answer`` (replacing the scope's earlier one), unless it expired already."""
        self.expire(now)
        if is_expired(answer, now, self.window):
            return
        known = self._answers.pop(answer.scope, None)
        if known is not None and known.accepted_at > answer.accepted_at:
            answer = known  # applied out of order: the later answer stays
        self._answers[answer.scope] = answer
        while len(self._answers) > self.max_entries:
            self._answers.popitem(last=False)
            self.dropped += 1

    def get(self, scope: str, now: float) -> IdempotentAnswer | None:
        answer = self._answers.get(scope)
        if answer is None:
            return None
        if is_expired(answer, now, self.window):
            del self._answers[scope]
            return None
        return answer

    def expire(self, now: float) -> None:
        """Drop the expired answers at the front (insertion order is about accepted_at's)."""
        while self._answers:
            scope, oldest = next(iter(self._answers.items()))
            if not is_expired(oldest, now, self.window):
                return
            del self._answers[scope]
