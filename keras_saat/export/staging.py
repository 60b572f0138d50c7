"""Staging folders of SavedModel exports, renamed into place when whole; a killed
export's folder is swept by the next export."""

import os
import re
import shutil
import socket
from pathlib import Path

from keras_saat.io_utils import process_alive

# .<version>.partial-<host>-<pid>: a base shared by several machines (NFS) sweeps only
# the folders of this machine's processes, the only ones it can tell are gone.
STAGING = re.compile(r"\.(\d+)\.partial-(.+)-(\d+)")


def staging_folder(base, version):
    """Where this process writes `version` before renaming it into place."""
    return Path(base) / f".{version}.partial-{socket.gethostname()}-{os.getpid()}"


def sweep_staging(base, log=print):
    """Removes the staging folders of exports whose process is gone (killed mid-write);
    a running export's is left alone. Returns how many were removed."""
    swept = 0
    for path in Path(base).iterdir():
        found = STAGING.fullmatch(path.name)
        if not found or not path.is_dir() or found.group(2) != socket.gethostname():
            continue
        pid = int(found.group(3))
        if pid != os.getpid() and process_alive(pid):  # our own: an earlier call that failed
            continue
        shutil.rmtree(path, ignore_errors=True)
        swept += 1
    if swept:
        log(f"removed {swept} staging folder(s) of exports that were stopped in {base}")
    return swept
