"""Evaluation harness, metrics, leaderboard and plots."""
