"""A self-contained demo engine (demollm + demoinfer) and offline images, so the lifecycle runs
for real without a GPU or a public registry."""
