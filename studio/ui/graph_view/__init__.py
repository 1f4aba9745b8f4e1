"""The Graph panel, a small package: ``panel`` (the widget and its wiring), ``canvas``
(zoom/pan view and overview), ``items`` (node and frame painting), ``style`` (colours).
What to show (expansion, overlays, search, details, recipe edits) is plain logic in
``accel.graph`` and ``accel.recipe_edits``."""

from studio.ui.graph_view.panel import GraphView

__all__ = ["GraphView"]
