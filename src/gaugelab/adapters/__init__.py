"""PEFT-format LoRA adapters: ``adapter_model.safetensors`` + ``adapter_config.json``.

Read and written without pickle (``safetensors`` and JSON only), in PEFT's key layout
(``base_model.model.<module path>.lora_A.weight`` / ``lora_B.weight``); each module's rank comes
from its tensors and its scale from ``(alpha, r, use_rslora)`` of that module. gaugelab adds
``gaugelab_factor_records.json`` (the factor records of seed 003 §0x07I), which PEFT ignores.

    adapter = Adapter.load("path/to/adapter")      # a PEFT save_pretrained directory
    adapter.delta_weight("blocks.0.attn.q_proj")   # s·B A, [d_out, d_in]
    adapter.apply(model)                           # LoRALinear layers in a gaugelab model
    Adapter.from_model(model).save("out/adapter")  # loadable by PeftModel.from_pretrained
"""

from gaugelab.adapters.adapter import Adapter
from gaugelab.adapters.config import AdapterConfig
from gaugelab.adapters.module import AdapterModule

__all__ = ["Adapter", "AdapterConfig", "AdapterModule"]
