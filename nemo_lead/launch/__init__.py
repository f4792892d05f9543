"""launch layer (see DESIGN.md)."""
