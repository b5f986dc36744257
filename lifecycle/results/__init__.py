"""Results: what a boot was found to do, recorded against it, archived with its evidence."""
