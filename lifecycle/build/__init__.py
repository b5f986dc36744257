"""Build a labelled engine image from a manifest through the Docker Engine API."""
