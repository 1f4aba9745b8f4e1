"""Accel Studio: the desktop application and its services."""

__version__ = "0.1.0"
