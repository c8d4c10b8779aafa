"""Writing what a command outputs without ever losing a user's file (docs/guide/cli.md "Where commands write").

A folder output (``compile -o``, ``firmware -o``) holds a manifest, ``.tinytrain-manifest.json``: the command that
wrote the folder and the sha256 of every file it wrote. ``OutputDir(path, command)`` decides, before the work,
what writing there means, and refuses (``UsageError``, one line) what would lose a file:

- a missing path (or an empty folder) is created: the files are written in a hidden temporary folder beside it,
  ``.NAME.tinytrain-XXXX``, renamed into place when all are written;
- an earlier output of the same command is replaced as a whole: the new files in a temporary folder, the files the
  manifest does not list (the user's: a ``main.c``, build products) linked into it, then the two folders swapped by
  renames; a file of ours changed since it was written (its sha256 differs) counts as the user's and is refused;
- anything else that exists is refused: a file, the output of another command, the folder the user is in with
  files of its own, a non-empty folder without a manifest. ``force=True`` writes into such a folder beside its
  files (staged in a hidden folder inside it, placed file by file with links that fail rather than replace); it
  never replaces or deletes a file tinytrain did not write: a name clash is refused whatever ``force`` says.

A file output (``convert -o``, ``train --state-out``, ``plan -o``, ...) is written through a hidden temporary file
beside it and renamed into place; an existing file is replaced only when its content shows it is the kind of file
the command writes there (``FILE_KINDS``: an ONNX model tinytrain produced, a state file, a plan, ...), and never
when it is one of the command's inputs. On every error nothing is left behind: no partial file or folder, no
temporary, no parent folder created for it.
"""

from tinytrain.outputs.files import FILE_KINDS, check_file, write_file, write_files
from tinytrain.outputs.folder import MANIFEST, OutputDir, read_manifest

__all__ = ["FILE_KINDS", "MANIFEST", "OutputDir", "check_file", "read_manifest", "write_file", "write_files"]
