"""``ans config show``: the effective configuration and where each value came from."""

from __future__ import annotations

import argparse

from .. import config as config_mod
from ..config_env import show


def cmd_config_show(args: argparse.Namespace) -> int:
    cfg, origin = config_mod.load_with_origin(args.config)
    print(
        show(cfg, config_mod.SECTIONS, config_mod.RENAMED, config_mod.TABLES, origin),
        end="",
    )
    return 0
