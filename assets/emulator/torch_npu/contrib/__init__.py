"""``torch_npu.contrib`` of the stand-in package; ``import torch_npu.contrib.transfer_to_npu`` remaps cuda to npu."""
