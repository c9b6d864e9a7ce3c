"""Statistics shared by report, calibrate, the demo and the alert simulation; imports nothing in cp_observe."""
