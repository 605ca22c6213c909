"""The one file-access layer: how seqpack opens, writes and replaces every path it touches.

Every command (and every MCP tool) goes through it for every path, including paths it finds inside
files (blend sources, image paths in rows, tokenizer files, caches). By concern:

* :mod:`.confine`: the allowed-roots policy (MCP roots) every path is checked against;
* :mod:`.reading`: regular files only, refused at once when a path is a FIFO, a device, a socket or a
  directory;
* :mod:`.atomic`: write targets (never through a symlink) and atomic files and directories;
* :mod:`.temporaries`: the temporaries of atomic writes, their locks, and recovery after ``kill -9``;
* :mod:`.ownership`: where outputs may be created, and which existing directories a command may reuse or
  replace (only its own).

Each name is also importable from this package (loaded on first use).
"""

from __future__ import annotations

from seqpack.core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "atomic_directory": "atomic",
    "atomic_output": "atomic",
    "check_write_target": "atomic",
    "write_text": "atomic",
    "OutsideRootsError": "confine",
    "allowed_roots": "confine",
    "confine": "confine",
    "confined_to": "confine",
    "scratch_directory": "confine",
    "DirectoryState": "ownership",
    "Owner": "ownership",
    "SYSTEM_DIRECTORIES": "ownership",
    "check_output_root": "ownership",
    "check_replace_target": "ownership",
    "examine_directory": "ownership",
    "file_record": "ownership",
    "output_directory": "ownership",
    "record_files": "ownership",
    "require_own": "ownership",
    "stray_files": "ownership",
    "verify_records": "ownership",
    "is_regular_file": "reading",
    "open_regular": "reading",
    "read_bytes": "reading",
    "read_json": "reading",
    "read_text": "reading",
    "regular_file": "reading",
    "StaleTemporary": "temporaries",
    "exists_or_link": "temporaries",
    "recover_temporaries": "temporaries",
    "remove_path": "temporaries",
    "stale_temporaries": "temporaries",
    "temporary_name": "temporaries",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
