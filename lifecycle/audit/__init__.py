"""Audit: the chain behind a result (from the ledger or S3 alone), its forms, and verify."""
