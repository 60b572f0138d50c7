"""Dataset readers, one module per format, registered by name; each returns a `CaptionDataset`."""
