"""Autogenerate a new migration: ``python -m studio.store.migrations.revision MESSAGE``."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from alembic import command

from studio.store import db


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    message = " ".join(args) or "change"
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'rev.db'}"
        engine = db.make_engine(url)
        if db.head_revision():
            db.migrate(engine, backup=False)
        cfg = db.alembic_config(url)
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.revision(cfg, message=message, autogenerate=True)
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
