"""Sluice's exceptions: one root, :class:`SluiceError`, and the argument errors every module raises.

``except SluiceError`` catches every error Sluice raises on purpose, and nothing else.  Each
subclass also keeps the builtin base it always had, as httpx and aiokafka do: a bad configuration
value is still a ``ValueError`` and an unreachable tracker still a ``ConnectionError``, so code that
catches builtins keeps working.  A bad argument to a function or constructor (a negative rate, a
callable that is not one) raises :class:`InvalidArgument` or :class:`InvalidArgumentType`, still a
``ValueError`` or ``TypeError``; a call the object's state does not allow raises
:class:`InvalidState`, still a ``RuntimeError``.  A test keeps library code from raising a bare
builtin exception.

``retriable`` says whether the same operation, tried again later unchanged, may succeed: ``True``
for a peer that did not answer in time or went away (connection, unavailable, timeout); ``False``
for protocol, configuration, misuse and corrupt-data errors, where only a change helps.  A
tracker's ``error`` reply (:class:`~sluice.tracker.wire.protocol.RemoteError`) decides per reply code.

Each class lives in the module that raises it (several carry that module's logic, and a subclass
is imported from where it is used) and says there what the list of errors needs: its builtin base,
its ``retriable`` flag and, in its docstring's first line, when it is raised.  The list is
docs/reference/errors.md, generated from the classes when the site is built by walking the
package; a test holds every class to having all three.  ``errors`` imports nothing, so any module
can derive from the root.
"""

from __future__ import annotations

__all__ = ["InvalidArgument", "InvalidArgumentType", "InvalidState", "SluiceError"]


class SluiceError(Exception):
    """The root of every error Sluice raises on purpose.

    :cvar retriable: the same operation, tried again later unchanged, may succeed.
    """

    retriable: bool = False


class InvalidArgument(SluiceError, ValueError):
    """A value given to a function or constructor is not allowed; the message names what is."""


class InvalidArgumentType(SluiceError, TypeError):
    """An argument is of the wrong type; the message names the type expected."""


class InvalidState(SluiceError, RuntimeError):
    """A call the object's state does not allow (started twice, used after a stop)."""
