"""The statistics every offline command, the demo and the simulations share: moments, Welch, normal z, Wilson, κ."""
