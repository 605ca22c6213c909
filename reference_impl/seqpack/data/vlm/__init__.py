"""VLM rows: the sample contract, image and video checks, the vision preprocessing, M-RoPE and the demo."""
