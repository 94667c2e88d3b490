"""Safety-Gymnasium tasks through an isolated bridge process."""
