"""Loads the pretrained vision-language backbone and wraps it with LoRA adapters."""

import os
from typing import Optional

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForVision2Seq, AutoProcessor


def load_backbone(name: str, lora_rank: Optional[int], freeze_vision: bool = True):
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    processor = AutoProcessor.from_pretrained(name, trust_remote_code=True)
    model = AutoModelForVision2Seq.from_pretrained(
        name,
        torch_dtype=torch.bfloat16,
        attn_implementation="flash_attention_2",
        low_cpu_mem_usage=True,
        trust_remote_code=True,
        device_map={"": local_rank},
    )
    if freeze_vision:
        for param in model.vision_backbone.parameters():
            param.requires_grad_(False)
    if lora_rank:
        lora_cfg = LoraConfig(r=lora_rank, lora_alpha=min(lora_rank, 16), lora_dropout=0.0,
                              target_modules="all-linear", init_lora_weights="gaussian")
        model = get_peft_model(model, lora_cfg)
    return model, processor


def load_backbone_for_eval(name: str):
    attn = "sdpa" if torch.__version__ >= "2.1" else "eager"
    return AutoModelForVision2Seq.from_pretrained(name, attn_implementation=attn, torch_dtype=torch.bfloat16)
