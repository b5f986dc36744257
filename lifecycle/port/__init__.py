"""`lifecycle port`: replay a patch series on the next upstream release, with evidence."""
