"""Boot a built engine image with its JIT caches mounted from tracked host dirs."""
