"""The megatron engine (`engine.kind=megatron`): our own KV cache and continuous batching over the actor's
megatron-core model (`engine`), its copy at its own layout, CUDA-graph decode, the KV budget."""
