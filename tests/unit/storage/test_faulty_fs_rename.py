"""FaultyFileSystem.rename moves the files open on the renamed path, without walking every open file.

The simulator's disks (SimDisk) are FaultyFileSystems. Each rename (every atomic checkpoint
write: partition.metadata, leader-epoch-checkpoint) walked a copy of every descriptor open on
the disk: with 6,000 partitions per broker, 4.7 of the 15 CPU-seconds the simulator spent
creating the sixth topic of 1,000 (issue 28's measurements). The descriptors open on a path are
now kept by path; a descriptor still open on the old name is the new name's: what it writes and
fsyncs afterwards counts for the new name, as a power cut then shows.
"""

from __future__ import annotations

import os

from odradek.storage.fs import FaultyFileSystem


def test_a_renamed_open_file_is_tracked_under_its_new_name(tmp_path):
    fs = FaultyFileSystem(real_fsync=False)
    others = [fs.open(str(tmp_path / f"o{i}"), create=True) for i in range(50)]
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    fd = fs.open(a, create=True)
    fd2 = fs.open(a)
    fs.pwrite(fd, b"12345678", 0)
    fs.fsync(fd)
    fs.rename(a, b)
    fs.pwrite(fd, b"9999", 8)  # after the rename, never synced
    fs.pwrite(fd2, b"xy", 12)
    fs.fsync(fd2)  # synced through the second descriptor: 14 bytes durable under b
    fs.pwrite(fd, b"zz", 14)
    fs.close(fd)
    fs.close(fd2)
    fs.crash()
    assert os.path.getsize(b) == 14
    # a new file by the old name, on a reused descriptor number, is not the renamed one
    fd3 = fs.open(a, create=True)
    fs.rename(a, str(tmp_path / "c"))
    fs.pwrite(fd3, b"abc", 0)
    fs.close(fd3)
    fs.crash()
    assert os.path.getsize(tmp_path / "c") == 0 and not os.path.exists(a)
    for o in others:
        fs.close(o)
    assert fs._fds_of == {}
