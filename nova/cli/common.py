"""What ``nova`` and ``nova-config`` share: the argument parser, ``--version``, the ``--tf32-fast``
rule and the exit-status convention.

Exit status (both commands):

* 0: success;
* 2: bad input or usage, argparse's convention: a bad shape, dtype, target or option, a problem
  no kernel can run, a bad ``NOVA_*`` variable (``ShapeError``, ``ProblemError``,
  ``AttentionProblemError``, ``PointwiseProblemError``, ``OptimizerProblemError``, ``TargetError``,
  ``UsageError``, ``OptionError``);
* 1: a runtime failure: compiling, the driver, files, a kernel that failed in a batch;
* 70: an internal error (a Nova bug); 130: interrupted.

Errors print one line on stderr (``<prog>: error: ...``); ``NOVA_DEBUG=1`` shows the traceback.
"""
from __future__ import annotations

import argparse
import re
import sys

from nova import options

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 70, 130


class UsageError(ValueError):
    """Bad command-line input found after parsing (exit status 2)."""


class CliParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that reads every argument starting with ``-`` and a digit as a value,
    never as an option (no option of Nova's starts with a digit): ``explain matmul -3x4`` then
    reports a bad shape instead of "the following arguments are required: shape".  Subparsers
    inherit the class."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\d")

    def error(self, message: str):
        """Bad input is one line on stderr (exit 2), not argparse's usage block."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def version_string() -> str:
    from nova.version import __version__
    return f"nova {__version__}"


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=version_string(),
                        help="print the version (nova <version>) and exit")


def dtype_list(text: str) -> list[str]:
    """``"tf32, bf16"`` -> ``["tf32", "bf16"]``."""
    dtypes = [d.strip() for d in str(text).split(",") if d.strip()]
    if not dtypes:
        raise UsageError(f"no dtype in --dtype {text!r}; choose from tf32, bf16, fp16")
    return dtypes


def check_tf32_fast(dtypes: list[str], tf32_fast: bool) -> None:
    """``--tf32-fast`` applies to the tf32 problems of a dtype list (16-bit problems ignore it, see
    ``GemmProblem``); a list without tf32 is a mistake, rejected."""
    if tf32_fast and "tf32" not in dtypes:
        raise UsageError(f"--tf32-fast applies to --dtype tf32 only (FP32 inputs); --dtype {','.join(dtypes)} has no "
                         f"tf32: drop --tf32-fast")


def usage_errors() -> tuple[type, ...]:
    """Exceptions that mean bad input (exit 2); imported lazily (the configurator loads sympy)."""
    from nova.cli.shapes import ShapeError
    from nova.kernels.attention.problem import AttentionProblemError
    from nova.kernels.gemm.problem import ProblemError
    from nova.kernels.optimizer.problem import OptimizerProblemError
    from nova.kernels.pointwise.problem import PointwiseProblemError
    from nova.hwmodel.model import TargetError
    from nova.options import OptionError
    return ShapeError, ProblemError, AttentionProblemError, PointwiseProblemError, OptimizerProblemError, TargetError, \
        UsageError, OptionError


def dispatch(prog: str, call, runtime_errors: tuple[type, ...] = ()) -> int:
    """Run ``call()`` and map what it raises to one stderr line and the exit status above."""
    try:
        return int(call() or 0)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:             # output piped into head & co.
        return EXIT_OK
    except Exception as e:
        if options.debug():
            raise
        if isinstance(e, usage_errors()):
            print(f"{prog}: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(e, runtime_errors):
            msg = e.args[0] if isinstance(e, KeyError) and e.args else e
            print(f"{prog}: error: {msg}", file=sys.stderr)
            return EXIT_FAILURE
        print(f"{prog}: internal error: {type(e).__name__}: {e} (set NOVA_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL
