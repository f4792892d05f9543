"""The seam to megatron-core: where its releases differ (`compat`), and its import with the fused kernels
compiled at their first call (`lazy_import`)."""
