"""How the commands end on an error: a known one in one line, an unknown one with its traceback.

Every command's ``main`` (``cory-train``, ``cory-eval``, ``cory-export``, ``cory-bench`` and the
example scripts) is decorated with :func:`one_line_errors`. Run as a program, it prints an error
of cory-env's own (a :class:`~cory_env.errors.CoryError`: a model not found, an unknown reward, a
damaged checkpoint, a setting that cannot work, ...) as argparse prints a bad argument::

    cory-train: error: unknown reward 'sentimnet': ...

and exits with the error's :attr:`~cory_env.errors.CoryError.exit_code`: 2 for a
:class:`~cory_env.errors.UsageError` (change the command line), 1 otherwise. The message says
what is wrong and what to do; the traceback adds nothing for a user, so it is left out.

``--debug`` on the command line (or ``CORY_DEBUG=1`` in the environment) lets the error through
instead, with its full traceback and Python's exit status 1, for a bug report. Any other
exception (a bug, in cory-env or in your code) always keeps its traceback.

A stop signal ends a command in one line too, at any moment, with the shell's code for it: 130
for Ctrl-C (SIGINT), 143 for SIGTERM (``cory-train: stopped by SIGTERM``). What a command writes
is atomic (checkpoints, exported models, reports), so a stop leaves the last one whole. cory-train
does better inside its loop: the first signal finishes the iteration and writes a checkpoint
(:mod:`cory_agents.training.interrupt`); a second one stops at once, as here.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

from cory_env.errors import CoryError

#: The flag that shows an error's traceback; every command accepts it and lists it in ``--help``.
DEBUG_FLAG = "--debug"
#: The environment variable that does the same for every command (``CORY_DEBUG=1``).
DEBUG_VARIABLE = "CORY_DEBUG"

Parser = TypeVar("Parser", bound=argparse.ArgumentParser)
Result = TypeVar("Result")


def add_debug_flag(parser: Parser) -> Parser:
    """List ``--debug`` in ``parser``'s help, and make its errors one line (:func:`one_line_usage_errors`). The
    flag never reaches the parser (:func:`one_line_errors` takes it off the command line first), so it adds
    nothing to what the parser returns."""
    parser.add_argument(
        DEBUG_FLAG,
        action="store_true",
        default=argparse.SUPPRESS,
        help=f"on an error, show its full traceback (also: {DEBUG_VARIABLE}=1)",
    )
    return one_line_usage_errors(parser)


def one_line_usage_errors(parser: Parser) -> Parser:
    """An unknown flag or a bad value ends ``parser`` in one line naming it, exit status 2, instead of
    argparse's usage of every flag above the error: ``cory-train: error: argument --lr: invalid float value:
    'abc' (cory-train --help lists the flags)``. Flags are not abbreviated: a misspelt flag (``--lr-warmup``)
    is an error, never another flag it begins."""
    parser.allow_abbrev = False

    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: error: {message} ({parser.prog} --help lists the flags)\n")

    parser.error = error  # type: ignore[method-assign]
    return parser


#: Training flags of cory-env 0.1 that 0.2 retired, and what to give instead (CHANGELOG.md).
RETIRED_FLAGS = {
    "--tensorboard": "--report-to none (or leave it out: TensorBoard is the default tracker)",
    "--no-tensorboard": "--report-to none",
    "--review-source": "--prompt-source (imdb or rotten_tomatoes)",
}


#: cory-eval's flags that 0.3 renamed: to cory-train's name for the same setting, or away from the name
#: cory-train gives another setting.
RETIRED_EVAL_FLAGS = {
    "--source": "--prompt-source (the same values: auto, imdb, rotten_tomatoes)",
    "--learner": "--learners (the learners to evaluate, e.g. llm_0; cory-train's --learner is the algorithm)",
}


class _Retired(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} {self.const}")  # const: "was retired in ...: use ..."


def refuse_retired_flags(parser: Parser, retired: dict[str, str] = RETIRED_FLAGS, version: str = "0.2") -> Parser:
    """Make ``parser`` refuse each flag of ``retired`` (:data:`RETIRED_FLAGS`, which cory-env ``version``
    retired) with a usage error that names its replacement (instead of argparse's "unrecognized
    arguments"); they stay out of ``--help``."""
    for flag, replacement in retired.items():
        names = dict.fromkeys([flag, "--" + flag[2:].replace("-", "_")])  # as HfArgumentParser's, both spellings
        parser.add_argument(
            *names,
            nargs="?",
            const=f"was retired in cory-env {version}: use {replacement}",
            action=_Retired,
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
        )
    return parser


def debug_requested(args: Sequence[str]) -> bool:
    """Whether ``--debug`` is among ``args`` (before a ``--``) or ``CORY_DEBUG`` is set to a true value."""
    on = os.environ.get(DEBUG_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")
    return on or len(_without_debug_flag(args)) < len(args)


def error_line(prog: str, exc: CoryError) -> str:
    """``<prog>: error: <message>``, as argparse writes a bad argument; a message of several lines keeps them."""
    return f"{prog}: error: {str(exc) or type(exc).__name__}"


def one_line_errors(run: Callable[[list[str]], Result]) -> Callable[[Sequence[str] | None], Result]:
    """Make ``run(args)`` a command's ``main(argv=None)``.

    ``main()``, as a console script or ``if __name__ == "__main__"`` calls it, reads ``sys.argv``
    and ends a :class:`~cory_env.errors.CoryError` with :func:`error_line` on stderr and its exit
    code (unless ``--debug`` or ``CORY_DEBUG=1``: then it propagates). ``main(argv)``, as a test, a
    notebook or another program calls it, runs the same command on ``argv`` and raises every
    exception to its caller. Either way ``--debug`` is taken off the arguments ``run`` gets.
    """

    @functools.wraps(run)
    def main(argv: Sequence[str] | None = None) -> Result:
        args = sys.argv[1:] if argv is None else list(argv)
        if argv is not None or debug_requested(args):
            return run(_without_debug_flag(args))
        prog = os.path.basename(sys.argv[0])
        with _sigterm_raises():
            try:
                return run(args)
            except CoryError as exc:
                _close_progress_bars()
                sys.stdout.flush()  # what the command printed before, then the error
                print(error_line(prog, exc), file=sys.stderr)
                raise SystemExit(exc.exit_code) from None
            except (KeyboardInterrupt, Stopped) as exc:
                name = exc.signal if isinstance(exc, Stopped) else "SIGINT"
                _close_progress_bars()
                sys.stdout.flush()
                print(f"{prog}: stopped by {name}", file=sys.stderr)
                raise SystemExit(128 + signal.Signals[name].value) from None

    return main


class Stopped(BaseException):
    """A stop signal other than Ctrl-C (SIGTERM) while a command runs; like ``KeyboardInterrupt``, not
    an ``Exception``, so that no ``except Exception`` holds it up."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal = signal_name


class _sigterm_raises:
    """Inside the block, SIGTERM raises :class:`Stopped` (as SIGINT raises ``KeyboardInterrupt``)
    instead of ending the process without a word; the handler before comes back after."""

    def __enter__(self) -> None:
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, _raise_stopped)

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def _raise_stopped(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)


def _close_progress_bars() -> None:
    """End the progress bars the error left open (each on its line), so the error starts a line of its own."""
    tqdm = sys.modules.get("tqdm.std")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()


def _without_debug_flag(args: Sequence[str]) -> list[str]:
    """``args`` less ``--debug`` (an argument after ``--`` is a value, kept)."""
    args = list(args)
    end = args.index("--") if "--" in args else len(args)
    return [a for a in args[:end] if a != DEBUG_FLAG] + args[end:]


__all__ = [
    "Stopped",
    "DEBUG_FLAG",
    "DEBUG_VARIABLE",
    "add_debug_flag",
    "debug_requested",
    "error_line",
    "one_line_errors",
]
