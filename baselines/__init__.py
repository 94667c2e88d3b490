"""Baselines on stable-baselines3. Importing registers them."""
