"""The pure domain core: decisions only, no I/O (stdlib and attrs alone)."""
