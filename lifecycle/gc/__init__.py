"""`lifecycle gc --remote`: remove what no kept record of an archive needs."""
