"""Dataset readers, one module per format, registered by name (`reader_registry`): each returns a `CaptionDataset`."""
