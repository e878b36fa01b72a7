"""Models: the precision decision for the device (and, as the stages move down, loading and saving)."""
