"""The frontend's one error: something in the user's program that Nova cannot capture or lower.

Its message is one line naming what (an op, a hook, an optimizer class, ``.item()``) and where
(the module path and source line that produced it)."""


class NovaUnsupportedError(RuntimeError):
    """A construct Nova does not capture; the message names what and where, in one line."""
