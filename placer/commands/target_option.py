"""The --target option of every command that costs or runs placements: one flag, with the spellings that
earlier versions used (--cluster; --machines for several targets) kept working as aliases."""

from __future__ import annotations

import argparse

TARGET_HELP = ("measured: inprocess:N, local:N or local:widths=2+1 (testbed; workers of different widths), "
               "local:2,link=1gbit (two workers over a shaped link), env, or a "
               "cluster spec (JSON or file); simulated: modeled:2xV100, modeled:4xA100-nvlink3, a machine file, or "
               "calibrated:FILE (the simulator of a real target, `placer calibrate`)")
"""What a target spec may be (`placer.cost.parse_target_spec`), for a command's help."""


def add_target_argument(parser: argparse.ArgumentParser, help: str, *, default: str | None = None,
                        several: bool = False) -> None:
    """--target TARGET (args.target), also spelled --cluster; several=True: --target T [T ...] (args.targets),
    also spelled --machines."""
    if several:
        parser.add_argument("--target", "--machines", dest="targets", nargs="+", default=default,
                            metavar="TARGET", help=help)
    else:
        parser.add_argument("--target", "--cluster", dest="target", default=default, metavar="TARGET", help=help)
