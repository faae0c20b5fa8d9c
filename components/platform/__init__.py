"""The whole platform: the stack's settings read and checked once, each component's inputs wired
from them and from the others' outputs, and GpuPlatform, which declares them in order."""
