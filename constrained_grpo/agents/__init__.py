"""Agents of the suite: the Constrained GRPO family. Importing registers them."""
