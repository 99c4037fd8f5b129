"""A file system that fails on purpose: a passthrough of BACKING mounted at MOUNT
(FUSE, through mfusepy), whose reads fail with EIO while the file CONTROL exists
and the path read matches the glob pattern it holds (relative to the mount, e.g.
`*/model.safetensors`; empty: every file). Everything else (stat, listing, writes,
renames, fsync) passes through, so a program sees what a failing disk or an NFS
hiccup shows it: a file that is there and cannot be read.

    python failfs.py BACKING MOUNT CONTROL     # foreground; unmount to end it

The tests mount it under a data root (testkit `FailingFs`); it is not part of
lavender.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import sys

import mfusepy as fuse


class FailFs(fuse.Operations):
    use_ns = True

    def __init__(self, backing: str, control: str) -> None:
        self.backing = os.path.realpath(backing)
        self.control = control

    def _path(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _failing(self, path: str) -> bool:
        try:
            with open(self.control) as f:
                pattern = f.read().strip()
        except FileNotFoundError:
            return False
        rel = path.lstrip("/")
        return not pattern or fnmatch.fnmatch(rel, pattern)

    # Files and folders as they are.
    def getattr(self, path, fh=None):
        st = os.lstat(self._path(path))
        keys = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")
        out = {k: getattr(st, k) for k in keys}
        for t in ("st_atime", "st_mtime", "st_ctime"):
            out[t] = getattr(st, t + "_ns")
        return out

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._path(path))

    def readlink(self, path):
        return os.readlink(self._path(path))

    def statfs(self, path):
        st = os.statvfs(self._path(path))
        keys = (
            "f_bavail",
            "f_bfree",
            "f_blocks",
            "f_bsize",
            "f_favail",
            "f_ffree",
            "f_files",
            "f_flag",
            "f_frsize",
            "f_namemax",
        )
        return {k: getattr(st, k) for k in keys}

    def mkdir(self, path, mode):
        return os.mkdir(self._path(path), mode)

    def rmdir(self, path):
        return os.rmdir(self._path(path))

    def unlink(self, path):
        return os.unlink(self._path(path))

    def symlink(self, target, source):
        return os.symlink(source, self._path(target))

    def rename(self, old, new):
        return os.rename(self._path(old), self._path(new))

    def link(self, target, source):
        return os.link(self._path(source), self._path(target))

    def chmod(self, path, mode):
        return os.chmod(self._path(path), mode)

    def chown(self, path, uid, gid):
        return os.chown(self._path(path), uid, gid)

    def utimens(self, path, times=None):
        return os.utime(self._path(path), ns=times) if times else os.utime(self._path(path))

    def truncate(self, path, length, fh=None):
        with open(self._path(path), "r+b") as f:
            f.truncate(length)

    # Open files: reads fail while told to.
    def open(self, path, flags):
        return os.open(self._path(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self._path(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def read(self, path, size, offset, fh):
        if self._failing(path):
            raise fuse.FuseOSError(errno.EIO)
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        return os.close(fh)

    def fsync(self, path, datasync, fh):
        return os.fdatasync(fh) if datasync else os.fsync(fh)

    def fsyncdir(self, path, datasync, fh):
        return 0


def main() -> None:
    backing, mount, control = sys.argv[1:4]
    # direct_io: every read reaches this process (no page cache hides the failure).
    fuse.FUSE(FailFs(backing, control), mount, foreground=True, nothreads=False, direct_io=True)


if __name__ == "__main__":
    main()
