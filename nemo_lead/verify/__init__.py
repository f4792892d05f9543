"""verify layer (see DESIGN.md)."""
