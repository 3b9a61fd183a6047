"""compilebench: what torch.compile buys Hugging Face vision models on your hardware."""
