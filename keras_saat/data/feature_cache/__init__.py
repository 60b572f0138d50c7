"""The frozen backbone's output on disk and on the device; the only code that knows its layout."""
