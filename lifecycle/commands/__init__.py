"""One module per verb: a plain typed function the CLI calls with parsed arguments."""
