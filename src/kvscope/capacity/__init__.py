"""The capacity model: bytes per token from a model's architecture, and each engine's sizing rules."""
