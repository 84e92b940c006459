"""“Did you mean …?” for misspelt keys and values (standard library difflib)."""

import difflib
from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate `word` most likely misspells, if any is close enough."""
    options = list(candidates)
    matches = difflib.get_close_matches(word, options, n=1, cutoff=0.75)
    if not matches:
        lowered = {option.lower(): option for option in options}
        matches = [lowered[m] for m in difflib.get_close_matches(word.lower(), lowered, n=1, cutoff=0.75)]
    return matches[0] if matches else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """' (did you mean X?)' or ''."""
    match = closest(word, candidates)
    return f" (did you mean {match!r}?)" if match is not None and match != word else ""
