"""eval layer (see DESIGN.md)."""
