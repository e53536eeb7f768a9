"""Every public name has a docstring: what ``help(dt.X)`` shows a newcomer."""

from __future__ import annotations

import inspect
from typing import Any

import dualtape as dt
from dualtape.losses import LOSSES


def public_members(cls: type) -> dict[str, Any]:
    """The public methods and properties of ``cls``, inherited ones included, except what
    ``object`` and other builtins give every class."""
    members = {}
    for owner in reversed(cls.__mro__):
        if owner.__module__ == "builtins":
            continue
        for name, value in vars(owner).items():
            if not name.startswith("_") and (
                inspect.isfunction(value) or isinstance(value, property | classmethod)
            ):
                members[name] = getattr(cls, name)
    return members


def missing_docstrings(module: Any) -> list[str]:
    """The names in ``module.__all__`` (and their classes' public members) whose ``help`` text
    would be empty. ``inspect.getdoc`` is what ``help`` shows: an override without a docstring
    shows the documented base method's."""
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if not inspect.getdoc(obj):
            missing.append(name)
        if inspect.isclass(obj):
            missing += [
                f"{name}.{member}"
                for member, value in public_members(obj).items()
                if not inspect.getdoc(value)
            ]
    return missing


def test_every_public_name_and_method_has_a_docstring():
    assert missing_docstrings(dt) == []


def test_a_planted_missing_docstring_is_found():
    class Documented:
        """A class."""

        def documented(self) -> None:
            """A method."""

        def bare(self) -> None:
            pass

        @property
        def bare_property(self) -> int:
            return 1

    def bare_function() -> None:
        pass

    class Module:
        __all__ = ["Documented", "bare_function"]

    Module.Documented, Module.bare_function = Documented, bare_function
    assert missing_docstrings(Module) == [
        "Documented.bare", "Documented.bare_property", "bare_function"]


def test_help_of_train_recurrent_lists_every_loss_and_the_accepted_shapes():
    text = inspect.getdoc(dt.train_recurrent)
    for name in LOSSES:
        assert f'"{name}"' in text, name
    for needed in ("``xs``: ``(T, B, n_in)``, or ``(T, n_in)``", "``targets``: ",
                   "class labels ``(T, B)`` or ``(T,)``", "``mask``: None",
                   "``(T,)`` or ``(T, B)``", "``state``: None", "rnet.initial_state(B)"):
        assert needed in text, needed
