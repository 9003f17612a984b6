"""System tier: worker processes and their failures, the launcher, DDP, S3 (moto), the soak,
fresh interpreters, CUDA (see tests/README.md)."""
