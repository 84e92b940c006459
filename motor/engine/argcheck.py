"""Check engine command lines with the engine's own argument parser, without starting the engine.

    python -m motor.engine.argcheck MODULE < argv-lists.json

MODULE is the module motor runs the engine as (`vllm.entrypoints.openai.api_server`, `motor.engine.sim`,
`sglang.launch_server`); stdin holds a JSON list of argument lists (what follows `python -m MODULE`). The last
line of stdout is `RESULT` and a JSON list with, for each, null when the parser takes it or the parser's error
message (an engine's import may log to stdout before it); exit 3, with the reason on stderr, when the engine is
not installed here. The parser is imported once for every list.
"""

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Callable
from typing import Any

NOT_INSTALLED = 3
RESULT = "motor-argcheck-result "

Check = Callable[[list[str]], None]


def _vllm() -> Check:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    return lambda argv: parser.parse_args(argv) and None


def _sim() -> Check:
    from motor.engine.sim.cli import parse_config

    return lambda argv: parse_config(argv, environ={}) and None


def _sglang() -> Check:
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return lambda argv: parser.parse_args(argv) and None


PARSERS: dict[str, Callable[[], Check]] = {
    "vllm.entrypoints.openai.api_server": _vllm,
    "motor.engine.sim": _sim,
    "sglang.launch_server": _sglang,
}


def refusal(check: Check, argv: list[str]) -> str | None:
    """None when `check` takes `argv`, else the parser's error message (argparse's last line)."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            check(argv)
    except SystemExit as exit_:
        if exit_.code in (0, None):
            return None
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        message = lines[-1] if lines else f"exit code {exit_.code}"
        return message.split(": error: ", 1)[-1]
    except Exception as exc:  # a parser that validates values may raise instead of exiting
        return f"{type(exc).__name__}: {exc}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in PARSERS:
        print(
            f"usage: python -m motor.engine.argcheck {{{','.join(PARSERS)}}} < argv-lists.json",
            file=sys.stderr,
        )
        return 2
    try:
        check = PARSERS[args[0]]()
    except ImportError as exc:
        print(f"{args[0]} is not installed here ({exc})", file=sys.stderr)
        return NOT_INSTALLED
    lists: Any = json.load(sys.stdin)
    print(RESULT + json.dumps([refusal(check, [str(a) for a in argv_list]) for argv_list in lists]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
