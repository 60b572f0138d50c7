"""Small file helpers shared by the data, training and serving packages."""

import json
import os


def write_json_atomic(path, content):
    """Writes JSON through a temporary file and a rename: a killed process never leaves half a file."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(content, indent=1))
    os.replace(tmp, path)
