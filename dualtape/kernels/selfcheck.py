"""Fast paths that check themselves against the generic code once, before their first use."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable

_VERDICTS: dict[Hashable, bool] = {}


def verified(key: Hashable, what: str, where: str, check: Callable[[], str | None]) -> bool:
    """Whether ``check()`` (how the fast path disagrees with the generic code, or None) passed
    for ``key`` (a path, device and dtype); run once per key, with one warning naming ``what``
    and ``where`` on a mismatch or an exception (then the caller uses the generic code)."""
    if key not in _VERDICTS:
        try:
            problem = check()
        except Exception as exc:  # a path that cannot even run is a failed check too
            problem = f"the check raised {type(exc).__name__}: {exc}"
        if problem:
            warnings.warn(f"dualtape: the {what} disagree with the generic code on {where}: "
                          f"{problem}; using the generic code", RuntimeWarning, stacklevel=5)
        _VERDICTS[key] = not problem
    return _VERDICTS[key]
