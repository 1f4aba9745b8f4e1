"""Where the studio keeps its files: the user data folder and the settings file (no
database or Qt imports, so every process can ask cheaply)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "accel-studio"
HOME_ENV = "ACCEL_STUDIO_HOME"  # one folder for data and settings (tests, portable installs)


def data_dir() -> Path:
    """The user data folder of the studio (created on demand)."""
    home = os.environ.get(HOME_ENV)
    path = Path(home) if home else platformdirs.user_data_path(APP_NAME, appauthor=False)
    path.mkdir(parents=True, exist_ok=True)
    return path


def settings_path() -> Path:
    home = os.environ.get(HOME_ENV)
    if home:
        return Path(home) / "settings.json"
    return platformdirs.user_config_path(APP_NAME, appauthor=False) / "settings.json"
