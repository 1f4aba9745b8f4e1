"""Pieces several commands share: the store they open and the trust opt-ins they take."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from studio.store.api import Store


def open_repo(args: argparse.Namespace) -> Store:
    """The store named by ``--db`` (default location otherwise); a UserError if it cannot open."""
    from studio.errors import UserError
    from studio.store import Repository, StoreError

    try:
        return Repository.open(args.db)
    except StoreError as exc:
        raise UserError(str(exc)) from None


def add_trust_arguments(p: argparse.ArgumentParser) -> None:
    """The opt-ins only the person running a recipe can give (a recipe never grants them)."""
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="allow full unpickling of the model file (it can run any code the file contains)",
    )
    p.add_argument(
        "--trust-recipe-code",
        action="store_true",
        help="allow the recipe's file.py:factory / pkg.mod:factory sources, data and metric "
        "functions to be imported and called (only for recipes you trust)",
    )
