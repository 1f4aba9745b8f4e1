"""Qt widgets of the studio: one panel per module, each ``Panel(state, services, parent=None)``."""
