"""models layer (see DESIGN.md)."""
