"""An output folder written all or nothing, with a manifest of its files (the package docstring says how)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from tinytrain.errors import UsageError
from tinytrain.version import __version__

MANIFEST = ".tinytrain-manifest.json"
TMP = ".tinytrain-"  # in every temporary's name


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(folder: Path) -> dict | None:
    """The manifest of an output folder ({"command", "version", "files": {relative path: sha256}}), or None."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
        if not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("command"), str):
            raise ValueError("no command or files")
    except (OSError, ValueError, AttributeError) as e:
        raise UsageError(f"{path}: not a tinytrain manifest ({e}); move it away or give another folder") from None
    return manifest


def _fail(path: Path, e: OSError):
    return UsageError(f"cannot write {path}: {e.strerror or e}")


def _inside_cwd(path: Path) -> bool:
    """The current folder is ``path`` or inside it (renaming it would pull the folder away from under the user)."""
    cwd = Path.cwd().resolve()
    return cwd == path or path in cwd.parents


class OutputDir:
    """The output folder of ``command`` at ``path``, checked now (``UsageError``) and written by ``with``:

        target = OutputDir(out, "compile")          # before the work: refuse early
        ...
        with target as stage:                         # write the files into stage
            (stage / "report.json").write_text(...)

    On leaving the block without an exception the files are committed (see the module docstring); with one,
    nothing is left behind. ``inputs``: paths the command reads, which the output must not be."""

    def __init__(self, path: str | Path, command: str, *, force: bool = False, inputs=()) -> None:
        self.path, self.command, self.force = Path(path), command, force
        self.inputs = tuple(Path(p) for p in inputs)
        self.check()

    def check(self) -> None:
        """Decide the mode (``new``, ``replace`` or ``beside``) and what is ours; UsageError if writing loses a file."""
        p, real = self.path, self.path.resolve()
        self.real, self.ours, self.mode = real, {}, "new"
        if any(real == i.resolve() for i in self.inputs):
            raise UsageError(f"-o {p} is an input of this command; give another folder for the output")
        if real.exists() and not real.is_dir():
            raise UsageError(f"-o {p} is a file; give the name of a folder (a new one, or an earlier output of "
                             f"`tinytrain {self.command}`)")
        if not real.exists():
            return
        manifest = read_manifest(real)
        if manifest is not None:
            if manifest["command"] != self.command:
                raise UsageError(f"-o {p} is the output of `tinytrain {manifest['command']}`, not of `tinytrain "
                                 f"{self.command}`; give another folder")
            self.ours, self.mode = self._unchanged(manifest["files"]), "replace"
        elif any(real.iterdir()):
            if not self.force:
                raise UsageError(f"-o {p} is a folder with files of its own (no {MANIFEST}: not an earlier output "
                                 f"of `tinytrain {self.command}`); give a new folder, or --force to write beside "
                                 "its files")
            self.mode = "beside"

    def _unchanged(self, files: dict) -> dict[str, str]:
        """The manifest's files still as tinytrain wrote them; refuses a file the user has changed."""
        ours = {}
        for rel, digest in files.items():
            path = self.real / rel
            if ".." in Path(rel).parts or Path(rel).is_absolute():
                raise UsageError(f"{self.path / MANIFEST}: lists {rel}, outside the folder; move the manifest away")
            if path.is_symlink() or not path.exists():
                continue
            if not path.is_file() or _sha256(path) != digest:
                raise UsageError(f"{self.path / rel} was changed since tinytrain wrote it; move it away (or keep "
                                 "it and give another folder)")
            ours[rel] = digest
        return ours

    def __enter__(self) -> Path:
        self.check()  # again: the folder may have changed during the work
        self.created = _missing_parents(self.real)
        try:
            for d in reversed(self.created):
                d.mkdir()
            self.in_place = self.mode == "beside" or (self.real.exists() and _inside_cwd(self.real))
            where = self.real if self.in_place else self.real.parent
            self.stage = Path(tempfile.mkdtemp(prefix=f".{self.real.name}{TMP}", dir=where))
        except OSError as e:
            self._remove_parents()
            raise _fail(self.path, e) from None
        return self.stage

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self._commit()
                return
            except OSError as e:
                self._abort()
                raise _fail(self.path, e) from None
            except BaseException:
                self._abort()
                raise
        self._abort()

    def _abort(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)  # ours only: new files, links to the user's files
        self._remove_parents()

    def _remove_parents(self) -> None:
        for d in self.created:
            try:
                d.rmdir()
            except OSError:
                pass

    def _new_files(self) -> dict[str, str]:
        files = {}
        for path in sorted(self.stage.rglob("*")):
            if path.is_file():
                files[path.relative_to(self.stage).as_posix()] = _sha256(path)
        return files

    def _manifest(self, files: dict[str, str]) -> bytes:
        return (json.dumps({"command": self.command, "version": __version__, "files": files}, indent=1)
                + "\n").encode("utf-8")

    def _commit(self) -> None:
        files = self._new_files()
        for rel in files:
            self._check_free(Path(rel))
        if self.in_place:
            _place(self.stage, self.real, files, self.ours, self._manifest(files))
        else:
            (self.stage / MANIFEST).write_bytes(self._manifest(files))
            self._swap()

    def _check_free(self, rel: Path) -> None:
        """A new file's name (and its folders') over a file of the user's: refused, force or not."""
        for folder in reversed(rel.parents[:-1]):
            on_disk = self.real / folder
            if on_disk.is_symlink() or (on_disk.exists() and not on_disk.is_dir()):
                raise UsageError(f"{self.path / folder} exists and is not a folder of tinytrain's; move it away "
                                 "or give another folder")
        on_disk = self.real / rel
        if (on_disk.is_symlink() or on_disk.exists()) and rel.as_posix() not in self.ours:
            raise UsageError(f"{self.path / rel} exists and tinytrain did not write it; move it away or give "
                             "another folder")

    def _swap(self) -> None:
        """Carry the user's files over into the stage (links), then rename the stage into place."""
        if self.mode == "new":
            mode = self.real.stat().st_mode if self.real.exists() else 0o777 & ~umask()
            os.chmod(self.stage, mode & 0o7777)
            os.replace(self.stage, self.real)  # over nothing, or over an empty folder
            return
        _carry_over(self.real, self.stage, set(self.ours) | {MANIFEST})
        os.chmod(self.stage, self.real.stat().st_mode & 0o7777)
        old = Path(tempfile.mkdtemp(prefix=f".{self.real.name}{TMP}old-", dir=self.real.parent))
        os.replace(self.real, old)
        try:
            os.replace(self.stage, self.real)
        except OSError:
            os.replace(old, self.real)
            raise
        _remove_old(old, self.real, set(self.ours) | {MANIFEST})


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _missing_parents(path: Path) -> list[Path]:
    """``path`` and its missing ancestors, innermost first (created for the output, removed on error)."""
    missing = []
    while not path.exists() and not path.is_symlink():
        missing.append(path)
        path = path.parent
    return missing[1:]  # the folder itself is the stage's rename target


def _user_entries(folder: Path, ours: set[str]):
    """(relative path, path) of everything in ``folder`` that is not ours, parents before children; a folder
    holding files of ours is not listed (the new files make it again), the user's files in it are."""
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        base = Path(root)
        for name in dirs + sorted(names):
            path = base / name
            rel = path.relative_to(folder).as_posix()
            if rel in ours or (path.is_dir() and not path.is_symlink()
                               and any(o.startswith(rel + "/") for o in ours)):
                continue
            yield rel, path


def _carry_over(src: Path, dest: Path, ours: set[str]) -> None:
    """Link every user entry of ``src`` into ``dest`` (a copy where hard links are not possible)."""
    for rel, path in _user_entries(src, ours):
        target = dest / rel
        if path.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(path), target)
        elif path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, target)
            except OSError:
                shutil.copy2(path, target)
        else:
            raise UsageError(f"{path} is neither a file nor a folder; tinytrain cannot carry it over into the new "
                             "output: move it away")


def _remove_old(old: Path, new: Path, ours: set[str]) -> None:
    """Remove the replaced folder: our old files, and the user's, each of which the new folder holds too."""
    for rel, path in reversed(list(_user_entries(old, ours))):
        twin = new / rel
        if path.is_symlink() or path.is_dir():
            continue
        if not (twin.is_file() and (os.path.samefile(path, twin) or twin.read_bytes() == path.read_bytes())):
            return  # keep the old folder rather than risk a file; it is a hidden sibling with the user's files
    shutil.rmtree(old)


def _place(stage: Path, dest: Path, files: dict[str, str], ours: dict[str, str], manifest: bytes) -> None:
    """Move the staged ``files`` into ``dest`` beside its other files: our old files (and manifest) moved aside
    first, each new one placed by a link that fails rather than replace a file; on an error everything placed is
    undone and our old files put back. The manifest goes last."""
    aside, placed, made = stage / (TMP + "old"), [], []
    old = [rel for rel in (*ours, MANIFEST) if (dest / rel).is_file()]
    try:
        for rel in old:
            (aside / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(dest / rel, aside / rel)
        for rel in files:
            for parent in reversed(Path(rel).parents[:-1]):
                if not (dest / parent).exists():
                    (dest / parent).mkdir()
                    made.append(dest / parent)
            _link_new(stage / rel, dest / rel)
            placed.append(dest / rel)
        (stage / MANIFEST).write_bytes(manifest)
        os.replace(stage / MANIFEST, dest / MANIFEST)
    except BaseException:
        for path in placed:
            path.unlink()
        for path in reversed(made):
            path.rmdir()
        for rel in old:
            if (aside / rel).exists():
                os.replace(aside / rel, dest / rel)
        raise
    shutil.rmtree(stage)


def _link_new(src: Path, dest: Path) -> None:
    """``src`` also at ``dest``, which must not exist: a hard link, or a copy opened exclusively."""
    try:
        os.link(src, dest)
    except FileExistsError:
        raise
    except OSError:
        with open(src, "rb") as f, open(dest, "xb") as g:
            shutil.copyfileobj(f, g)
