"""``sparklink`` command line: dispatches to one module per sub-command (driver side)."""

from __future__ import annotations

import argparse
import sys

from sparklink import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparklink",
        description="Exactly-once sources and sinks for Spark Structured Streaming.",
    )
    parser.add_argument("--version", action="version", version=f"sparklink {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from sparklink.cli import demo, finish_command, inspect_command, run_command, verify_command

    demo.add_parser(commands)
    run_command.add_parser(commands)
    inspect_command.add_parser(commands)
    verify_command.add_parser(commands)
    finish_command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
