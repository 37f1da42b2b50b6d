"""The errors of cory-env's own: each message says what is wrong and what to do.

Every exception class the package defines derives from :class:`CoryError` (and, where it did
before, from the builtin it was: ``except ValueError`` keeps catching a bad setting). The
command-line tools print a :class:`CoryError` as one line, ``cory-train: error: <message>``,
and exit with its :attr:`~CoryError.exit_code`: 2 for a :class:`UsageError` (a setting or
argument that cannot work, as argparse does), 1 otherwise. ``--debug`` (or ``CORY_DEBUG=1``)
shows the traceback as well; an exception of any other class keeps its traceback always,
since it is not one the package knows how to explain (:mod:`cory_agents.cli.errors`).
"""

from __future__ import annotations


class CoryError(Exception):
    """An error of cory-env's own whose message names the problem and the fix."""

    #: The exit status the command-line tools end with when they print this error.
    exit_code = 1


class UsageError(CoryError, ValueError):
    """A setting, argument or combination of them that cannot work: change the command line."""

    exit_code = 2


class NonFiniteUpdateError(CoryError):
    """A learner's update met a number that is NaN or infinite (the scores or advantages it learns
    from, a loss, the gradient norm): it raised before the optimizer step that would have used it, so
    no NaN reached the weights or the optimizer state. The message names the learner, the iteration,
    the quantity and what to try; the attributes hold them too (``iteration`` counts from 1, as the
    run's messages do; ``quantity``: ``"scores"``, ``"advantages"``, ``"returns"``, ``"loss"`` or
    ``"gradient norm"``)."""

    def __init__(self, message: str, *, learner: str = "", iteration: int = 0, quantity: str = ""):
        super().__init__(message)
        self.learner, self.iteration, self.quantity = learner, iteration, quantity


__all__ = ["CoryError", "NonFiniteUpdateError", "UsageError"]
