"""A FUSE filesystem that keeps every write in memory until it is synced, and
drops whatever is not synced when the power is cut (the model of LazyFS).

It mirrors a backing directory. ``write`` and ``truncate`` change only an
in-memory image of the file's pages and size, which reads see, as a page
cache would; ``fsync``/``fdatasync`` write the file's image to the backing
file and sync it. Names (create, unlink, rename, mkdir) go to the backing
directory at once, as if every directory change were synced: the loss modelled
is that of file contents and sizes, which is what a database's syncs protect.

A power cut (the ``cut`` command) drops every unsynced page and size at once
and fails every later operation with EIO: the backing directory then holds
exactly what had been synced, as a disk would after the machine lost power.

Runs as its own process, driven through standard input, one command a line,
each answered on standard output: ``cut`` answers ``cut <dropped bytes>``,
``syncs`` answers ``syncs <how many syncs made something durable so far>``. The
end of standard input unmounts. Usage: ``python power_loss_fs.py BACKING MOUNTPOINT``.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mfusepy as fuse

PAGE = 4096


@dataclass
class _Image:
    """A file's unsynced state: its logical size, the pages written since its
    last sync, and where the backing file's bytes stop counting (a truncation
    not yet synced hides what lies beyond it)."""

    size: int
    visible: int
    pages: dict[int, bytearray] = field(default_factory=dict)


class PowerLossFs(fuse.Operations):  # type: ignore[misc]
    use_ns = True

    def __init__(self, backing: Path) -> None:
        self.backing = backing
        self._mutex = threading.Lock()
        self.images: dict[str, _Image] = {}
        self.powered = True
        self.syncs = 0
        """Syncs that made something durable (for tests that ask whether one
        happened after a write)."""

    # --- helpers -----------------------------------------------------------------

    def _real(self, path: str) -> str:
        return str(self.backing / path.lstrip("/"))

    def _check(self) -> None:
        if not self.powered:
            raise fuse.FuseOSError(errno.EIO)

    def _image(self, path: str) -> _Image:
        image = self.images.get(path)
        if image is None:
            size = os.stat(self._real(path)).st_size
            image = self.images[path] = _Image(size=size, visible=size)
        return image

    def _backing_page(self, path: str, image: _Image, index: int) -> bytearray:
        start = index * PAGE
        data = b""
        if start < image.visible:
            with open(self._real(path), "rb") as file:
                file.seek(start)
                data = file.read(min(PAGE, image.visible - start))
        return bytearray(data.ljust(PAGE, b"\0"))

    def _read(self, path: str, size: int, offset: int) -> bytes:
        image = self.images.get(path)
        if image is None:
            with open(self._real(path), "rb") as file:
                file.seek(offset)
                return file.read(size)
        end = min(offset + size, image.size)
        out = bytearray()
        position = offset
        while position < end:
            index, within = divmod(position, PAGE)
            page = image.pages.get(index)
            if page is None:
                page = self._backing_page(path, image, index)
            take = min(PAGE - within, end - position)
            out += page[within : within + take]
            position += take
        return bytes(out)

    def _write(self, path: str, data: bytes, offset: int) -> int:
        image = self._image(path)
        position, view = offset, memoryview(data)
        while view:
            index, within = divmod(position, PAGE)
            page = image.pages.get(index)
            if page is None:
                page = image.pages[index] = self._backing_page(path, image, index)
            take = min(PAGE - within, len(view))
            page[within : within + take] = view[:take]
            view, position = view[take:], position + take
        image.size = max(image.size, offset + len(data))
        return len(data)

    def _truncate(self, path: str, length: int) -> None:
        image = self._image(path)
        for index in [index for index in image.pages if index * PAGE >= length]:
            del image.pages[index]
        last, within = divmod(length, PAGE)
        if within and last in image.pages:
            image.pages[last][within:] = bytes(PAGE - within)
        image.size = length
        image.visible = min(image.visible, length)

    def _sync(self, path: str) -> None:
        image = self.images.pop(path, None)
        if image is None:
            return
        self.syncs += 1
        fd = os.open(self._real(path), os.O_WRONLY)
        try:
            os.ftruncate(fd, image.visible)
            for index in sorted(image.pages):
                start = index * PAGE
                if start < image.size:
                    os.pwrite(fd, bytes(image.pages[index][: image.size - start]), start)
            os.ftruncate(fd, image.size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def cut(self) -> int:
        """The power fails: every unsynced byte is gone."""
        with self._mutex:
            self.powered = False
            dropped = sum(
                len(page) for image in self.images.values() for page in image.pages.values()
            )
            self.images.clear()
            return dropped

    # --- FUSE operations ---------------------------------------------------------

    def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
        with self._mutex:
            self._check()
            st = os.lstat(self._real(path))
            attrs = {key: getattr(st, key) for key in ("st_mode", "st_nlink", "st_uid", "st_gid")}
            attrs |= {"st_size": st.st_size, "st_blocks": st.st_blocks}
            attrs |= {
                "st_atime": st.st_atime_ns,
                "st_mtime": st.st_mtime_ns,
                "st_ctime": st.st_ctime_ns,
            }
            image = self.images.get(path)
            if image is not None:
                attrs["st_size"] = image.size
            return attrs

    def readdir(self, path: str, fh: Any) -> list[str]:
        with self._mutex:
            self._check()
            return [".", "..", *os.listdir(self._real(path))]

    def access(self, path: str, amode: int) -> int:
        with self._mutex:
            self._check()
            if not os.access(self._real(path), amode):
                raise fuse.FuseOSError(errno.EACCES)
            return 0

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            self._check()
            if flags & os.O_TRUNC:
                self._truncate(path, 0)
            return 0

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        with self._mutex:
            self._check()
            os.close(os.open(self._real(path), os.O_CREAT | os.O_WRONLY, mode))
            self.images.pop(path, None)
            return 0

    def read(self, path: str, size: int, offset: int, fh: Any) -> bytes:
        with self._mutex:
            self._check()
            return self._read(path, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: Any) -> int:
        with self._mutex:
            self._check()
            return self._write(path, data, offset)

    def truncate(self, path: str, length: int, fh: Any = None) -> int:
        with self._mutex:
            self._check()
            self._truncate(path, length)
            return 0

    def fsync(self, path: str, datasync: int, fh: Any) -> int:
        with self._mutex:
            self._check()
            self._sync(path)
            return 0

    def flush(self, path: str, fh: Any) -> int:
        with self._mutex:
            self._check()
            return 0  # closing a file syncs nothing

    def release(self, path: str, fh: Any) -> int:
        return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            self._check()
            os.unlink(self._real(path))
            self.images.pop(path, None)
            return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            self._check()
            os.rename(self._real(old), self._real(new))
            self.images.pop(new, None)
            if old in self.images:
                self.images[new] = self.images.pop(old)
            return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self._mutex:
            self._check()
            os.mkdir(self._real(path), mode)
            return 0

    def rmdir(self, path: str) -> int:
        with self._mutex:
            self._check()
            os.rmdir(self._real(path))
            return 0

    def chmod(self, path: str, mode: int) -> int:
        with self._mutex:
            self._check()
            os.chmod(self._real(path), mode)
            return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        with self._mutex:
            self._check()
            os.chown(self._real(path), uid, gid)
            return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        with self._mutex:
            self._check()
            os.utime(self._real(path), ns=times)
            return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._real(path))
        return {
            key: getattr(st, key)
            for key in (
                "f_bsize",
                "f_frsize",
                "f_blocks",
                "f_bfree",
                "f_bavail",
                "f_files",
                "f_ffree",
                "f_namemax",
            )
        }


def _commands(fs: PowerLossFs, mountpoint: str) -> None:
    """Reads commands until standard input ends, then unmounts."""
    for line in sys.stdin:
        command = line.strip()
        if command == "cut":
            print(f"cut {fs.cut()}", flush=True)
        elif command == "syncs":
            with fs._mutex:
                print(f"syncs {fs.syncs}", flush=True)
    # Detach the mount even while files are open, then end the process: what was
    # synced is already in the backing files, and nothing else may reach them.
    subprocess.run(["umount", "-l", mountpoint], check=False, capture_output=True)
    os._exit(0)


def main(argv: list[str]) -> None:
    backing, mountpoint = Path(argv[1]), argv[2]
    fs = PowerLossFs(backing)
    threading.Thread(target=_commands, args=(fs, mountpoint), daemon=True).start()
    fuse.FUSE(fs, mountpoint, foreground=True, nothreads=False)


if __name__ == "__main__":
    main(sys.argv)
