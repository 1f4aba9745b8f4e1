"""Opening the experiment database: URL resolution, SQLite pragmas, migrations at start-up.

SQLite is opened in WAL mode with foreign keys on and a busy timeout; write
transactions start with ``BEGIN IMMEDIATE`` so two writers queue on the busy
timeout instead of failing with "database is locked" when a read transaction
tries to upgrade to a write one. Migrations run under a file lock after a
backup copy of the database file has been taken.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from studio.paths import data_dir, settings_path

log = logging.getLogger(__name__)

DB_ENV = "ACCEL_STUDIO_DB"
BUSY_TIMEOUT_MS = 60_000
MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def default_db_path() -> Path:
    return data_dir() / "studio.db"


def resolve_db_url(db: str | os.PathLike[str] | None = None) -> str:
    """Database URL from ``--db`` (URL or file path), else env ``ACCEL_STUDIO_DB``, else the
    ``database`` key of the settings file, else the SQLite file in the user data folder."""
    if db is None:
        db = os.environ.get(DB_ENV) or None
    if db is None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            db = json.loads(settings_path().read_text()).get("database") or None
    if db is None:
        db = default_db_path()
    text = os.fspath(db)
    if "://" in text:
        return text
    path = Path(text).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL; None for other databases and in-memory SQLite."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    database = u.database
    if database.startswith("file:"):  # a URI filename (?mode=ro&uri=true): the path in it
        from urllib.parse import unquote

        database = unquote(database[5:].split("?", 1)[0])
        if not database or database == ":memory:" or "mode=memory" in url:
            return None
    return Path(database)


def make_engine(url: str, *, foreign_keys: bool = True) -> Engine:
    """An engine with the studio's connection settings (no migrations)."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        # Pooled connections: closing the last connection of a WAL database checkpoints
        # and deletes the WAL file, which costs an fsync per transaction.
        kw: dict[str, object] = {}
        if sqlite_path(url) is None:
            kw["poolclass"] = StaticPool  # in-memory: one shared connection
        engine = create_engine(
            url,
            connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
            **kw,
        )
        _install_sqlite_hooks(engine, foreign_keys=foreign_keys)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _install_sqlite_hooks(engine: Engine, *, foreign_keys: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
        # Let SQLAlchemy's "begin" hook below issue BEGIN itself (pysqlite's own
        # implicit BEGIN is always DEFERRED).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Off only for migrations: batch mode recreates tables, and dropping a parent
        # table with foreign keys on would cascade-delete its children's rows.
        cur.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
        if sqlite_path(str(engine.url)) is not None:
            cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def write_engine(engine: Engine) -> Engine:
    """The same engine, whose transactions start with BEGIN IMMEDIATE on SQLite."""
    if engine.dialect.name != "sqlite":
        return engine
    return engine.execution_options(sqlite_begin="IMMEDIATE")


# --- migrations ---------------------------------------------------------------------------


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head() or ""


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _lock_path(url: str) -> Path:
    path = sqlite_path(url)
    if path is not None:
        return path.with_name(path.name + ".migrate.lock")
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    return data_dir() / f"migrate-{key}.lock"


def backup_sqlite(path: Path, tag: str) -> Path | None:
    """Copy a SQLite file (consistently, through the backup API) next to itself."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    dest = path.with_name(f"{path.name}.bak-{tag}-{stamp}")
    src = sqlite3.connect(path)
    try:
        dst = sqlite3.connect(dest)
        with dst:
            src.backup(dst)
        dst.close()
    finally:
        src.close()
    return dest


class NewerDatabaseError(RuntimeError):
    """The database was created by a newer version of the studio (unknown revision)."""


def _known_revision(rev: str) -> bool:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    try:
        return script.get_revision(rev) is not None
    except Exception:  # noqa: BLE001 - alembic raises for unknown ids
        return False


def _has_backup(path: Path, rev: str) -> bool:
    return any(path.parent.glob(f"{path.name}.bak-{rev}-*"))


def migrate(engine: Engine, *, backup: bool = True) -> str:
    """Upgrade the database to the newest schema; returns the revision it is at.

    Runs under a file lock so that several processes starting at once migrate once.
    A SQLite file that needs upgrading is copied first (``studio.db.bak-<rev>-<time>``).
    """
    from alembic import command

    url = engine.url.render_as_string(hide_password=False)
    head = head_revision()
    lock = FileLock(str(_lock_path(url)), timeout=120)
    with lock:
        current = current_revision(engine)
        if current == head:
            return head
        if current is not None and not _known_revision(current):
            shown = engine.url.render_as_string(hide_password=True)
            raise NewerDatabaseError(
                f"the database {shown} was created by a newer version of the studio (schema "
                f"revision {current}; this version knows up to {head}). Update Accel Studio, "
                "or use another database with --db."
            )
        path = sqlite_path(url)
        # One backup per revision: a migration that keeps failing must not copy the whole
        # database again on every start.
        if backup and path is not None and current is not None and not _has_backup(path, current):
            saved = backup_sqlite(path, current)
            log.info("backed up %s to %s before migrating", path, saved)
        cfg = alembic_config(url)
        in_memory = engine.dialect.name == "sqlite" and path is None
        # In-memory SQLite lives in the engine's one connection: migrate through it.
        mig_engine = engine if in_memory else make_engine(url, foreign_keys=False)
        try:
            with write_engine(mig_engine).begin() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                if conn.dialect.name == "sqlite":
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise RuntimeError(f"migration left broken foreign keys: {broken[:5]}")
        finally:
            if mig_engine is not engine:
                mig_engine.dispose()
        log.info("migrated database from %s to %s", current, head)
    return head


@contextlib.contextmanager
def open_engine(url: str, *, migrate_schema: bool = True) -> Iterator[Engine]:
    engine = make_engine(url)
    try:
        if migrate_schema:
            migrate(engine)
        yield engine
    finally:
        engine.dispose()
