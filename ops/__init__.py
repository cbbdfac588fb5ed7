"""Operations: the vLLM-compatible simulator and deployment files."""
