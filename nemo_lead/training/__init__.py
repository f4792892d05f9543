"""training layer (see DESIGN.md)."""
