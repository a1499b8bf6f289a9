"""Importers and exporters for the formats users already have: FlashInfer-Bench and KernelBench."""
