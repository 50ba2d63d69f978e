"""One module per injectable GPU fault, registered by its dashed name."""
