"""training layer (docs/design.md)."""
