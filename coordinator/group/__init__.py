"""The classic consumer-group protocol: states, the group model and the pure group manager."""
