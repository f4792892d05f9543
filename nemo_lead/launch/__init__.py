"""launch layer (docs/design.md)."""
