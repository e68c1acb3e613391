"""Quantization converters (float8 and MX through torchao)."""
