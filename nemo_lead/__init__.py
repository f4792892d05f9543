"""nemo_lead: GRPO-LEAD on megatron-core (SFT, two RL stages, AIME evaluation).

Importing the package is cheap: Megatron, transformers and math-verify load only in the modules that use
them. See docs/design.md, Layers, for what each subpackage may import.
"""

__version__ = "0.1.0"

from nemo_lead.mcore import lazy_import as _megatron_import

_megatron_import.install()  # megatron-core's fused kernels compile at their first call, not at its import
