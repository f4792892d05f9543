"""generation layer (see DESIGN.md)."""
