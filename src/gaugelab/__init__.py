"""gaugelab."""
