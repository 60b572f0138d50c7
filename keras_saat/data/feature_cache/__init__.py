"""The frozen backbone's output on disk (record format, index, writer, reader, damage checks) and on the device (resident): the only code that knows the cache's layout."""
