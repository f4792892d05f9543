"""A checkpoint folder's format, read and checked without torch: its path and meta.json (`meta`), the
manifest of its files (`manifest`), the CRC-32 taken while megatron writes it (`hashing`), `nemo-lead check`."""
