"""parallel layer (see DESIGN.md)."""
