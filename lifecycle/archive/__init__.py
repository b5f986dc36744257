"""Archive cache evidence (and optionally content) to S3, verified, content-addressed."""
