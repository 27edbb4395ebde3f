"""The one backoff formula: a delay that doubles with each attempt, up to a cap."""

CAP_SECONDS = 600.0


def backoff(attempt: int, base: float, cap: float = CAP_SECONDS) -> float:
    """Return the delay before retry `attempt` (1, 2, ...): base, 2 x base, 4 x base..., capped."""
    return float(min(base * 2 ** max(attempt - 1, 0), cap))
