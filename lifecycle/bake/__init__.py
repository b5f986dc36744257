"""Bake: verified warm caches delivered inside an engine image, one layer per cache."""
