"""Highway-driving task family on highway-env."""
