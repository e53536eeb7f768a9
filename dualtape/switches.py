"""On/off switches read from the environment (``DUALTAPE_JIT``, ``DUALTAPE_FUSED``): read at
each call, never at import, so a process may change them between calls."""

from __future__ import annotations

import os

OFF = ("0", "false", "off", "no")
ON = ("", "1", "true", "on", "yes")


def switched_on(name: str) -> bool:
    """Whether the environment variable ``name`` leaves its feature on (unset or empty: on).
    Case and surrounding blanks aside, ``0``/``false``/``off``/``no`` turn it off and
    ``1``/``true``/``on``/``yes`` on; any other value raises ``ValueError`` naming it."""
    value = os.environ.get(name, "")
    spelled = value.strip().lower()
    if spelled in ON:
        return True
    if spelled in OFF:
        return False
    raise ValueError(f"environment variable {name}={value!r}: use one of "
                     f"{', '.join(OFF)} (off) or {', '.join(ON[1:])} (on), or leave it unset")
