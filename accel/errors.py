"""Errors the user can hit. Their message says what went wrong and what to change."""

from __future__ import annotations


class AccelError(Exception):
    """Base class for errors shown to the user as is (no traceback needed)."""


class ModelLoadError(AccelError):
    """A model source could not be loaded."""


class UntrustedCodeError(ModelLoadError):
    """Loading would run code (a recipe's factory, pickled objects) the user did not opt into."""


class InputSpecError(AccelError, ValueError):
    """An input specification string or file is malformed or does not fit the model."""


class PassError(AccelError):
    """A pass cannot apply to this model; the message tells the user what to change."""


class NotApplicable(PassError):
    """A pass has nothing to do on this model (e.g. no BatchNorm to fold); found before any work."""


class RecipeError(AccelError, ValueError):
    """A recipe file is malformed or refers to unknown passes or parameters."""


class DataError(AccelError, ValueError):
    """A data source (calibration / evaluation data) is empty, malformed or does not fit."""


class Cancelled(AccelError):
    """The user cancelled the job."""
